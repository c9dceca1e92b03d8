"""What the package reads, and how (docs/reliability.md): a file is opened only when it is a regular file
(``open_input_file``, ``check_input_file``; stdin only where a command documents "-"), so a FIFO without a writer
or a device like /dev/zero fails at once with one line naming it instead of hanging or filling memory; JSON files
are read with a size cap (``read_json``); a symlink loop is one line (``resolve``).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from bitnet_onnx.errors import BitnetOnnxError

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
