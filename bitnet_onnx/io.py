"""The output-safety rule every writer of the package follows (docs/reliability.md):

- paths are resolved first, and an output that is, contains or is inside an input is refused
  (``check_apart``);
- results are built under a temp name in the destination folder and renamed into place at the end,
  so a failure, Ctrl-C, SIGTERM or SIGHUP leaves either the old state or the whole new output;
- ``--overwrite`` replaces only what the tool itself wrote before (the caller's ``ours`` test);
- the final rename never replaces something that appeared meanwhile (``rename_noreplace``);
- results get the usual permissions of the user's umask (mkstemp/mkdtemp would leave them private).

    with atomic_file(path) as tmp:                 # a file: tmp is a Path next to path
        write(tmp)
    with atomic_folder(out_dir, overwrite=True, ours=is_export) as tmp:   # a folder
        fill(tmp)
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from bitnet_onnx.errors import BitnetOnnxError

_RENAME_NOREPLACE = 1  # linux/fs.h
_AT_FDCWD = -100


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_apart(output: str | Path, inputs: Iterable[str | Path], what: str = "output") -> Path:
    """The resolved output; an error when it is, contains or is inside one of ``inputs``."""
    out = Path(output).resolve()
    for source in inputs:
        src = Path(source).resolve()
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


# write failures of a full or capped disk; errno None: a library's short-write check
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, None)


@contextmanager
def _write_errors(path: Path, what: str) -> Iterator[None]:
    """A full disk while writing ``path`` becomes one error naming it (other OSErrors name their own file)."""
    try:
        yield
    except OSError as e:
        if e.errno not in _DISK_FULL or isinstance(e, (FileNotFoundError, FileExistsError)):
            raise
        reason = e.strerror or str(e)
        raise BitnetOnnxError(f"{what} {path}: could not write ({reason}); nothing written") from None


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
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    tmp = Path(name)
    try:
        with _write_errors(path, what):
            yield tmp
        os.chmod(tmp, 0o666 & ~umask())
        if existed:
            os.replace(tmp, path)
        else:
            _rename_new(tmp, path, what)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_folder(path: str | Path, overwrite: bool = False, what: str = "output",
                  ours: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """Yields an empty temp folder next to ``path``; on success it becomes ``path``, else it is removed.

    An existing ``path`` is replaced only with ``overwrite`` and when ``ours(path)`` (if given)
    says this tool wrote it: the old folder is swapped out, then removed.
    """
    path = Path(path)
    check_replaceable_folder(path, overwrite, what, ours)
    existed = os.path.lexists(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~umask())
        with _write_errors(path, what):
            yield tmp
        if os.path.lexists(path) and not existed:
            raise _appeared(path, what)
        if os.path.lexists(path):  # overwrite: swap, then drop the old folder
            check_replaceable_folder(path, overwrite, what, ours)
            _swap_in(tmp, path, what)
        else:
            _rename_new(tmp, path, what)
    except BaseException:
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


@contextmanager
def exit_cleanly_on_termination() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP unwind like Ctrl-C (exit status 128 + signal), so every
    atomic_* block removes its temp output; the previous handlers come back after it. For
    command-line entry points (a server installs its own handlers inside)."""
    def unwind(signum, _frame):
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (e.g. main() called from a test's thread)
        return
    previous = {sig: signal.signal(sig, unwind) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
