"""What the package writes, and how (docs/reliability.md):

- paths are resolved first, and an output that is, contains or is inside an input is refused
  (``check_apart``);
- results are built under a temp name in the destination folder and renamed into place at the end,
  so a failure, Ctrl-C, SIGTERM or SIGHUP leaves either the old state or the whole new output;
- ``--overwrite`` replaces only what the tool itself wrote before (the caller's ``ours`` test);
- the final rename never replaces something that appeared meanwhile (``rename_noreplace``);
- every file and folder of a result gets the usual permissions of the user's umask, whatever wrote
  it (mkstemp/mkdtemp and onnx's external data writer would leave them private);
- a failed write names its cause: the OS reason and the space left or the file size limit.

    with atomic_file(path) as tmp:                 # a file: tmp is a Path next to path
        write(tmp)
    with atomic_folder(out_dir, overwrite=True, ours=is_export) as tmp:   # a folder
        fill(tmp)
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import resource
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io.inputs import resolve
from bitnet_onnx.io.signals import signals_held

_RENAME_NOREPLACE = 1  # linux/fs.h
_AT_FDCWD = -100


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_apart(output: str | Path, inputs: Iterable[str | Path], what: str = "output") -> Path:
    """The resolved output; an error when it is, contains or is inside one of ``inputs``."""
    out = resolve(output, what)
    for source in inputs:
        src = resolve(source)
        if out == src:
            raise BitnetOnnxError(f"{what} {output} is the input {source}; choose another path")
        if src.is_relative_to(out):
            raise BitnetOnnxError(f"{what} {output} contains the input {source}; choose another path")
        if src.is_dir() and out.is_relative_to(src):
            raise BitnetOnnxError(f"{what} {output} is inside the input folder {source}; choose another path")
    return out


def rename_noreplace(src: Path, dst: Path) -> None:
    """rename(2) that fails with FileExistsError instead of replacing an existing ``dst`` (also an
    empty folder, which plain rename replaces silently)."""
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) \
        if hasattr(libc, "renameat2") else -2
    if rc == 0:
        return
    err = ctypes.get_errno() if rc == -1 else errno.ENOSYS
    if err == errno.EEXIST:
        raise FileExistsError(errno.EEXIST, "exists", str(dst))
    if err not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: the filesystem lacks RENAME_NOREPLACE
        raise OSError(err, os.strerror(err), str(dst))
    if os.path.lexists(dst):  # fallback: a small window, but never a known replacement
        raise FileExistsError(errno.EEXIST, "exists", str(dst))
    os.rename(src, dst)


def _existing_folder(path: Path, what: str) -> Path:
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise BitnetOnnxError(f"{what} {path}: folder {folder} does not exist")
    return folder


def _rename_new(tmp: Path, path: Path, what: str) -> None:
    """``tmp`` becomes ``path``, which did not exist when the write began and must not now."""
    try:
        rename_noreplace(tmp, path)
    except FileExistsError:
        raise _appeared(path, what) from None


def _appeared(path: Path, what: str) -> BitnetOnnxError:
    return BitnetOnnxError(f"{what} {path}: appeared while this run was writing; left as it is, nothing written")


# write failures of a full or capped disk; errno None: a library's short-write check (numpy's tofile,
# which gguf-py writes tensors with, says "16384 requested and 8208 written" and drops the errno)
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, None)
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")


def _free_bytes(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def size_text(n: float) -> str:
    """Bytes for a message: "812 bytes", "20.0 MiB", "13.5 GiB" (the largest unit under 1024 of it)."""
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def _file_size_limit() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def _out_of_space(e: OSError, free_at_failure: int | None) -> bool:
    """Whether a write failed for lack of space; for a library's short write (no errno), judged by
    the space left when it failed: less than the bytes it could not write."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if e.errno is not None or free_at_failure is None:
        return False
    short = _SHORT_WRITE.search(str(e))
    unwritten = int(short[1]) - int(short[2]) if short else 1
    return free_at_failure < max(unwritten, 1)


def _disk_full_reason(e: OSError, folder: Path, free_at_failure: int | None) -> str:
    """The cause of a failed write, worded as the OS would, with the numbers the user needs."""
    if _out_of_space(e, free_at_failure):
        name = os.strerror(e.errno if e.errno == errno.EDQUOT else errno.ENOSPC)
        free = _free_bytes(folder)  # after the partial output was removed: what the user has
        return f"{name}; {size_text(free)} free in {folder}" if free is not None else name
    limit = _file_size_limit()
    if e.errno == errno.EFBIG or (e.errno is None and limit is not None):
        name = os.strerror(errno.EFBIG)
        return f"{name}: the file size limit (ulimit -f) is {limit} bytes" if limit is not None else name
    return e.strerror or str(e)


@contextmanager
def _write_errors(path: Path, what: str, folder: Path, remove: Callable[[], None]) -> Iterator[None]:
    """A full disk while writing ``path`` becomes one error naming it and its cause (other OSErrors name
    their own file). ``remove`` drops the partial output first, so the free space reported is the user's."""
    try:
        yield
    except OSError as e:
        if e.errno not in _DISK_FULL or isinstance(e, (FileNotFoundError, FileExistsError)):
            raise
        free_at_failure = _free_bytes(folder)
        remove()
        reason = _disk_full_reason(e, folder, free_at_failure)
        raise BitnetOnnxError(f"{what} {path}: could not write ({reason}); nothing written") from None


def _umask_modes(root: Path) -> None:
    """Every file and folder under ``root`` (itself included) gets the mode a plain open/mkdir would
    give under the user's umask: libraries write some private (onnx's external data is 0600,
    mkstemp/mkdtemp are), and a service account must be able to load what the deploy user made.
    Executable bits of files are kept (within the umask); symlinks are left as they are."""
    mask = umask()
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o777 & ~mask)
        for name in filenames:
            file = os.path.join(dirpath, name)
            st = os.lstat(file)
            if stat.S_ISREG(st.st_mode):
                os.chmod(file, (0o777 if st.st_mode & 0o111 else 0o666) & ~mask)


@contextmanager
def atomic_file(path: str | Path, what: str = "output",
                ours: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yields a temp path in ``path``'s folder; on success it becomes ``path``, else it is removed.

    An existing ``path`` is replaced only when ``ours`` is None (a plain output, like a shell
    redirection) or ``ours(path)`` says this tool wrote it.
    """
    path = Path(path)
    folder = _existing_folder(path, what)
    if path.is_dir():
        raise BitnetOnnxError(f"{what} {path} is a directory")
    existed = path.exists()
    if existed and ours is not None and not ours(path):
        raise BitnetOnnxError(f"{what} {path} exists and was not written by bitnet-onnx; not replacing it")
    tmp: Path | None = None
    try:
        with signals_held:  # a signal while the temp file is made unwinds once it is known: here
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
            os.close(fd)
            tmp = Path(name)
        with _write_errors(path, what, folder, lambda: tmp.unlink(missing_ok=True)):
            yield tmp
        os.chmod(tmp, 0o666 & ~umask())
        if existed:
            os.replace(tmp, path)
        else:
            _rename_new(tmp, path, what)
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise


def replace_together(moves: Iterable[tuple[Path, Path]]) -> None:
    """``os.replace`` of each (source, target), in order, with exit_cleanly_on_termination's signals
    held: a Ctrl-C or SIGTERM lands before the first rename or after the last, never between renames
    that only together leave a consistent folder (a data file moved and the graphs that name it)."""
    with signals_held:
        for source, target in moves:
            os.replace(source, target)


@contextmanager
def atomic_folder(path: str | Path, overwrite: bool = False, what: str = "output",
                  ours: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yields an empty temp folder next to ``path``; on success it becomes ``path``, else it is removed.

    An existing ``path`` is replaced only with ``overwrite`` and when ``ours(path)`` (if given)
    says this tool wrote it: the old folder is swapped out, then removed. Everything in it gets the
    umask's modes (``_umask_modes``), whatever the library that wrote it.
    """
    path = Path(path)
    check_replaceable_folder(path, overwrite, what, ours)
    existed = os.path.lexists(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp: Path | None = None
    try:
        with signals_held:  # a signal while the temp folder is made unwinds once it is known: here
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        with _write_errors(path, what, path.parent, lambda: shutil.rmtree(tmp, ignore_errors=True)):
            yield tmp
        _umask_modes(tmp)
        if os.path.lexists(path) and not existed:
            raise _appeared(path, what)
        if os.path.lexists(path):  # overwrite: swap, then drop the old folder
            check_replaceable_folder(path, overwrite, what, ours)
            _swap_in(tmp, path, what)
        else:
            _rename_new(tmp, path, what)
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_in(tmp: Path, path: Path, what: str) -> None:
    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
    path.rename(old / "previous")
    try:
        rename_noreplace(tmp, path)
    except BaseException as e:
        try:  # put the previous folder back unless something else took its place
            rename_noreplace(old / "previous", path)
        except OSError:
            pass
        shutil.rmtree(old, ignore_errors=True)
        if isinstance(e, FileExistsError):
            raise _appeared(path, what) from None
        raise
    shutil.rmtree(old, ignore_errors=True)


def check_replaceable_folder(path: Path, overwrite: bool, what: str = "output",
                             ours: Callable[[Path], bool] | None = None) -> None:
    """The checks atomic_folder makes before writing, for callers that want to fail before slow work."""
    if not os.path.lexists(path):
        return
    if not overwrite:
        raise BitnetOnnxError(f"{path}: already exists; pass --overwrite to replace it")
    if path.is_symlink() or not path.is_dir():
        raise BitnetOnnxError(f"{path}: exists and is not a folder; not replacing it")
    if ours is not None and not ours(path):
        raise BitnetOnnxError(f"{path}: exists and was not written by bitnet-onnx; --overwrite replaces only "
                              "folders it wrote")
