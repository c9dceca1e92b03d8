"""What every fuzz target shares: the input as a file, and the rule that only BitnetOnnxError may escape.

A target module defines ``seeds()`` (valid files to start from) and ``check(path)`` (read the file the
way the tool does). Run one directly with libFuzzer options, e.g.

    python tests/fuzz/fuzz_gguf.py -max_total_time=600 -rss_limit_mb=2048 -timeout=10 CORPUS_DIR

Any exception other than BitnetOnnxError, a hang past -timeout or memory past -rss_limit_mb is a
crash (libFuzzer writes the input to crash-*/timeout-*/oom-* under -artifact_prefix).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

import atheris

REPO = Path(__file__).resolve().parents[2]


def scratch_folder(root: Path | None = None) -> Path:
    """This process's folder for the input file, in RAM when there is one (one file write per input):
    ROOT/<pid>, ROOT by default /dev/shm/bitnet-onnx-fuzz-<uid>. libFuzzer ends a run with C's exit(),
    past Python's atexit, so no run removes its own: each removes those of runs no longer alive."""
    if root is None:
        base = Path("/dev/shm") if os.path.isdir("/dev/shm") else Path(tempfile.gettempdir())
        root = base / f"bitnet-onnx-fuzz-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    for folder in root.iterdir():
        if folder.name.isdigit() and not _alive(int(folder.name)):
            shutil.rmtree(folder, ignore_errors=True)
    mine = root / str(os.getpid())
    mine.mkdir(exist_ok=True)
    return mine


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive too
        pass
    return True


def import_instrumented(*modules: str, include: tuple[str, ...] = ("bitnet_onnx",)) -> list:
    """Import ``modules`` with coverage instrumentation of the package's code, loaded from a copy of the
    checkout laid out as the wheel installs it (scripts/stage_package.py; an editable install's redirecting
    finder would hide the sources from atheris' import hook). Tracebacks name the copy's files, which keep
    the installed layout (bitnet_onnx/export/... for export/...)."""
    import importlib

    sys.path.insert(0, str(REPO / "scripts"))
    from stage_package import stage_package

    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    # in the temp folder (TMPDIR: test_fuzz gives each run its own), not in RAM with the inputs
    sys.path.insert(0, str(stage_package(Path(tempfile.mkdtemp(prefix="bitnet-onnx-fuzz-site-")))))
    with atheris.instrument_imports(include=list(include)):
        return [importlib.import_module(m) for m in modules]


def fuzz(check: Callable[[Path], None], file_name: str, argv: list[str]) -> None:
    from bitnet_onnx.errors import BitnetOnnxError

    path = scratch_folder() / file_name

    def one_input(data: bytes) -> None:
        path.write_bytes(data)
        try:
            check(path)
        except BitnetOnnxError:
            pass  # the promised one-line error

    atheris.Setup(argv, one_input)
    atheris.Fuzz()


def write_seeds(seeds: list[bytes], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(seeds):
        (folder / f"seed-{i}").write_bytes(data)


def main(seeds: Callable[[], list[bytes]], check: Callable[[Path], None], file_name: str) -> None:
    """``--seeds DIR`` writes the seed files; anything else is libFuzzer's command line."""
    if len(sys.argv) == 3 and sys.argv[1] == "--seeds":
        write_seeds(seeds(), Path(sys.argv[2]))
        return
    fuzz(check, file_name, sys.argv)
