"""All-or-nothing outputs: every writer of the package builds its result under a temp name in the
destination folder and renames it into place at the end, so a failure or an interrupt leaves either
the old state or the whole new output, never half of one.

    with atomic_file(path) as tmp:      # a file: tmp is a Path next to path
        write(tmp)
    with atomic_folder(out_dir, overwrite=True) as tmp:   # a folder: tmp is an empty folder
        fill(tmp)

Results get the usual permissions of the user's umask (mkstemp/mkdtemp would leave them private).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bitnet_onnx.errors import BitnetOnnxError


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _existing_folder(path: Path, what: str) -> Path:
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise BitnetOnnxError(f"{what} {path}: folder {folder} does not exist")
    return folder


@contextmanager
def atomic_file(path: str | Path, what: str = "output") -> Iterator[Path]:
    """Yields a temp path in ``path``'s folder; on success it replaces ``path``, else it is removed."""
    path = Path(path)
    folder = _existing_folder(path, what)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_folder(path: str | Path, overwrite: bool = False, what: str = "output") -> Iterator[Path]:
    """Yields an empty temp folder next to ``path``; on success it becomes ``path`` (an existing one
    is swapped out and removed only with ``overwrite``), else it is removed."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise BitnetOnnxError(f"{path}: already exists; pass --overwrite to replace it")
    if path.exists() and not path.is_dir():
        raise BitnetOnnxError(f"{path}: exists and is not a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~umask())
        yield tmp
        if path.exists():  # overwrite: swap, then drop the old folder
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            path.rename(old / "previous")
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
