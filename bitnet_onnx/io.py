"""The input and output rules every reader and writer of the package follows (docs/reliability.md).

Inputs: a file the package reads is opened only when it is a regular file (``open_input_file``,
``check_input_file``; stdin only where a command documents "-"), so a FIFO without a writer or a
device like /dev/zero fails at once with one line naming it instead of hanging or filling memory;
JSON files are read with a size cap (``read_json``); a symlink loop is one line (``resolve``).

Outputs:

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
import fcntl
import importlib.machinery
import json
import os
import re
import resource
import shutil
import signal
import stat
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator

from bitnet_onnx.errors import BitnetOnnxError

_RENAME_NOREPLACE = 1  # linux/fs.h
_AT_FDCWD = -100


# ---- inputs -----------------------------------------------------------------------------------

# A config-like JSON file (config.json, tokenizer_config.json, the manifest, ...) is a few KB; the cap
# keeps a hostile one from costing GBs while parsed. tokenizer.json holds the whole vocabulary (33 MB
# for Gemma3's 262k tokens), hence its own cap.
MAX_JSON_BYTES = 16 << 20
MAX_TOKENIZER_JSON_BYTES = 256 << 20

_KINDS = ((stat.S_ISDIR, "is a directory, not a file"), (stat.S_ISFIFO, "is a FIFO (named pipe), not a regular file"),
          (stat.S_ISSOCK, "is a socket, not a regular file"), (stat.S_ISCHR, "is a character device, not a regular file"),
          (stat.S_ISBLK, "is a block device, not a regular file"))


def _label(path: str | Path, what: str | None) -> str:
    return f"{what} {path}" if what else str(path)


def _not_regular(mode: int) -> str | None:
    """Why a file of this st_mode cannot be read as an input; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((reason for test, reason in _KINDS if test(mode)), "is not a regular file")


def input_error(path: str | Path, e: OSError, what: str | None = None, missing: str = "") -> BitnetOnnxError:
    """One line naming ``path`` for an OSError met while opening or reading it."""
    label = _label(path, what)
    if e.errno == errno.ENOENT:
        return BitnetOnnxError(f"{label}: file not found{missing}")
    if e.errno == errno.ELOOP:
        return BitnetOnnxError(f"{label}: a symlink loop (too many levels of symbolic links)")
    if e.errno == errno.EISDIR:
        return BitnetOnnxError(f"{label}: is a directory, not a file")
    if e.errno in (errno.EACCES, errno.EPERM):
        return BitnetOnnxError(f"{label}: permission denied (this user may not read it)")
    return BitnetOnnxError(f"{label}: cannot be read ({e.strerror or e})")


def check_input_file(path: str | Path, what: str | None = None, missing: str = "", limit: int | None = None) -> Path:
    """``path`` when it is (or links to) a regular file of at most ``limit`` bytes; else one line naming
    it. For paths handed to a library that opens them itself (safetensors, gguf, onnx, onnxruntime,
    tokenizers): a FIFO there would block the open forever, a device would be read without end."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise input_error(path, e, what, missing) from None
    reason = _not_regular(st.st_mode)
    if reason:
        raise BitnetOnnxError(f"{_label(path, what)}: {reason}")
    _check_size(path, what, st.st_size, limit)
    # opened once here (regular, so the open cannot block or touch a device): the libraries it is
    # handed to report a permission error as "file not found" (safetensors) or not at all
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC))
    except OSError as e:
        raise input_error(path, e, what, missing) from None
    return path


def _check_size(path: str | Path, what: str | None, size: int, limit: int | None) -> None:
    if limit is not None and size > limit:
        raise BitnetOnnxError(f"{_label(path, what)}: {size} bytes, more than the {limit} this file may have")


def open_input_file(path: str | Path, what: str | None = None, missing: str = "") -> BinaryIO:
    """``path`` opened for binary reading, only if it is a regular file (checked before the open and
    again on the open file, so a FIFO swapped in meanwhile cannot block: the open is non-blocking)."""
    path = check_input_file(path, what, missing)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise input_error(path, e, what, missing) from None
    try:
        reason = _not_regular(os.fstat(fd).st_mode)
        if reason:
            raise BitnetOnnxError(f"{_label(path, what)}: {reason}")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input_file(path: str | Path, what: str | None = None, limit: int | None = None, missing: str = "") -> bytes:
    """The bytes of a regular file (``open_input_file``); one line naming it when larger than ``limit``."""
    with open_input_file(path, what, missing) as f:
        _check_size(path, what, os.fstat(f.fileno()).st_size, limit)
        try:
            data = f.read() if limit is None else f.read(limit + 1)  # limit + 1: a file grown meanwhile
        except OSError as e:
            raise input_error(path, e, what, missing) from None
    if limit is not None and len(data) > limit:
        raise BitnetOnnxError(f"{_label(path, what)}: more than the {limit} bytes this file may have")
    return data


def read_json(path: str | Path, what: str | None = None, limit: int = MAX_JSON_BYTES, missing: str = "") -> Any:
    """A JSON file (a regular file of at most ``limit`` bytes, UTF-8); one line naming it otherwise.
    ``missing``: what to add when it does not exist, e.g. " (a model folder needs config.json)"."""
    data = read_input_file(path, what, limit, missing)
    try:
        return json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BitnetOnnxError(f"{_label(path, what)}: not valid JSON ({e})") from None
    except RecursionError:  # [[[[...: json recurses once per level
        raise BitnetOnnxError(f"{_label(path, what)}: not valid JSON (nested too deeply)") from None


def read_json_object(path: str | Path, what: str | None = None, limit: int = MAX_JSON_BYTES, missing: str = "") -> dict:
    """read_json of a file that must hold a JSON object (config files)."""
    data = read_json(path, what, limit, missing)
    if not isinstance(data, dict):
        raise BitnetOnnxError(f"{_label(path, what)}: expected a JSON object, got {type(data).__name__}")
    return data


def resolve(path: str | Path, what: str | None = None) -> Path:
    """``Path(path).resolve()``, with a symlink loop as one line naming ``path`` (pathlib raises
    RuntimeError for one before Python 3.13, OSError ELOOP after)."""
    try:
        return Path(path).resolve()
    except RuntimeError:
        raise BitnetOnnxError(f"{_label(path, what)}: a symlink loop (too many levels of symbolic links)") from None
    except OSError as e:
        raise input_error(path, e, what) from None


# ---- outputs ----------------------------------------------------------------------------------


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
        with _SIGNALS_HELD:  # a signal while the temp file is made unwinds once it is known: here
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
    with _SIGNALS_HELD:
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
        with _SIGNALS_HELD:  # a signal while the temp folder is made unwinds once it is known: here
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


class Terminated(SystemExit):
    """SIGTERM or SIGHUP, unwinding the stack like Ctrl-C; its code is the exit status, 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signal_name = signal.Signals(signum).name


_UNWINDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _unwinding(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


class _SignalsHeld:
    """A block in which the signals of exit_cleanly_on_termination wait, then unwind at its end.

    Creating a temp output and recording it for cleanup is not one step: a signal in between would
    leave it behind. Inside this block a signal is only noted; the block's end raises it, where the
    caller's cleanup knows the temp output. Effective under exit_cleanly_on_termination's handlers
    (the command line); elsewhere Python's own Ctrl-C handler raises at once.
    """

    def __init__(self) -> None:
        self.depth = 0
        self.pending: int | None = None
        self.received: int | None = None  # the first signal of the run, held or raised

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc) -> bool:
        self.depth -= 1
        if self.depth == 0 and self.pending is not None:  # also over an error of the block: the user stops
            signum, self.pending = self.pending, None
            raise _unwinding(signum)
        return False

    def handler(self, signum: int, _frame) -> None:
        self.received = self.received or signum
        if self.depth:
            self.pending = self.pending or signum
            return
        raise _unwinding(signum)


_SIGNALS_HELD = _SignalsHeld()


def received_signal() -> int | None:
    """The signal that came during exit_cleanly_on_termination's block, if one did. The exception it
    raised may reach the caller as another: a C extension importing when Ctrl-C comes reports an
    ImportError (numpy: 'PyCapsule_Import could not import module "datetime"')."""
    return _SIGNALS_HELD.received


@contextmanager
def exit_cleanly_on_termination() -> Iterator[None]:
    """Within the block, Ctrl-C raises KeyboardInterrupt and SIGTERM/SIGHUP ``Terminated`` (exit status
    128 + signal), never while a temp output is being created (``_SignalsHeld``), so every atomic_*
    block removes its temp output; the previous handlers come back after it. A signal the caller
    ignores (nohup's SIGHUP, a background job's SIGINT) stays ignored. For command-line entry points
    (a server installs its own handlers inside)."""
    _SIGNALS_HELD.received = None  # this run's, read by the caller after the block
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (e.g. main() called from a test's thread)
        return
    previous = {sig: signal.getsignal(sig) for sig in _UNWINDING}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _SIGNALS_HELD.handler)
    sys.meta_path.insert(sys.meta_path.index(importlib.machinery.PathFinder), _EXTENSIONS_INIT_HELD)
    try:
        yield
    finally:
        sys.meta_path.remove(_EXTENSIONS_INIT_HELD)
        for sig, handler in previous.items():
            if handler is not None:  # None: a handler not installed from Python, cannot be restored
                signal.signal(sig, handler)


class _ExtensionInitHeld:
    """An import finder, placed just before PathFinder, that runs a C extension's initialisation with
    the signals held (``_SignalsHeld``).

    A handler that raises while an extension module initialises raises inside C++ code that calls
    back into Python, and not every binding library can unwind from there: onnx 1.23's nanobind
    module, given Ctrl-C while it builds its enums, calls std::terminate (an abort and a C++ traceback
    instead of one line). Held, the signal unwinds when the module is made, in Python's import.
    Other modules are found as PathFinder would find them, since PathFinder is what comes next.
    """

    @staticmethod
    def find_spec(name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            spec.loader = _HeldLoader(spec.loader)
        return spec


class _HeldLoader:
    """A loader that runs another's create_module and exec_module (where an extension's init
    functions run: single- and multi-phase) with the signals held."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        with _SIGNALS_HELD:
            return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        with _SIGNALS_HELD:
            self.loader.exec_module(module)

    def __getattr__(self, name):  # get_filename, is_package, ... as the wrapped loader answers
        return getattr(self.loader, name)


_EXTENSIONS_INIT_HELD = _ExtensionInitHeld()
