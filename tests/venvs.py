"""Separate venvs for tests that need packages the project's own venv cannot hold (a fresh install of
our wheel in test_wheel.py; optimum's pinned transformers in test_integrations_optimum.py), and the
subprocess helpers that run commands in them with pip's output in the failure message."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# outside the repo: a fresh clone (CI) or a `git clean` keeps the costly venv builds
CACHE = Path(os.environ.get("BITNET_ONNX_TEST_CACHE") or Path.home() / ".cache" / "bitnet-onnx-tests")
COMPLETE = "bitnet-onnx-venv-complete.json"  # written last: a venv without it is a broken build


def run(cmd: list, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def run_ok(cmd: list, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    res = run(cmd, timeout, **kw)
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{res.stdout[-3000:]}\n{res.stderr[-4000:]}"
    return res


def isolated_env(venv: Path) -> dict[str, str]:
    """The environment of a user of that venv alone: the venv alone on PATH (no compiler, no cmake),
    none of our variables but the attention precision the suite runs auto at (conftest.py: f32, so the
    venv's embeddings compare with this process's on any CPU), nothing of this checkout on sys.path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BITNET_ONNX_", "PYTHON", "VIRTUAL_ENV"))
           or k == "BITNET_ONNX_ATTENTION_PRECISION"}
    env["PATH"] = str(venv / "bin")
    return env


@contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    """Holds an exclusive lock on `lock_file` (created): one session at a time builds what it guards."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached_venv(name: str, requirements: list[str], timeout: int = 1800) -> Path:
    """CACHE/name/<key>: a venv holding exactly ``requirements`` (pinned) and what pip resolves for
    them, built once and reused while the pins and this Python are the same (the key). A lock file
    serializes concurrent sessions; a build that failed or was cut short is removed and redone."""
    key_text = json.dumps({"requirements": requirements, "python": sys.version, "machine": platform.machine()})
    venv = CACHE / name / hashlib.sha256(key_text.encode()).hexdigest()[:16]
    with locked(venv.parent / f"{venv.name}.lock"):
        if (venv / COMPLETE).is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        run_ok([sys.executable, "-m", "venv", venv])
        python = venv / "bin" / "python"
        run_ok([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *requirements],
               timeout=timeout, env=isolated_env(venv))
        run_ok([python, "-m", "pip", "check"], env=isolated_env(venv))
        frozen = run_ok([python, "-m", "pip", "freeze"], env=isolated_env(venv)).stdout.split()
        (venv / COMPLETE).write_text(json.dumps({"key": json.loads(key_text), "installed": frozen}, indent=1))
    return venv
