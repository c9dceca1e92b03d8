"""A short fuzz run of each reader of untrusted files (tests/fuzz/: safetensors, GGUF, manifest).

Each target runs under atheris/libFuzzer in a subprocess for a fixed time budget, from its seed files;
a crash (any exception but BitnetOnnxError), a hang or runaway memory fails the test and leaves the
input in the test's tmp folder. Longer runs: docs/reliability.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the suite's tiers: tests/suite_marks.py

pytest.importorskip("atheris", reason="atheris is in the test extra (pip install '.[test]')")

FUZZ = Path(__file__).parent / "fuzz"
TARGETS = ("safetensors", "gguf", "manifest")
SECONDS = 20  # per target in CI
RSS_LIMIT_MB = 2048
INPUT_TIMEOUT_S = 10
# libFuzzer's -rss_limit_mb reads getrusage's peak RSS, which Linux carries across execve from the process
# that forked: a fuzzer started straight from this pytest (GBs after the real-shape tests) would start
# "out of memory". A small shell forks it instead (not exec: "; exit"), so the peak it sees is its own.
FRESH_PEAK = ["/bin/sh", "-c", '"$@"; exit $?', "sh"]


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target(target, tmp_path):
    script = FUZZ / f"fuzz_{target}.py"
    seeds, corpus, artifacts = tmp_path / "seeds", tmp_path / "corpus", tmp_path / "artifacts"
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the staged package copy of each run (tests/fuzz/common.py)
    subprocess.run([sys.executable, str(script), "--seeds", str(seeds)], check=True, capture_output=True, env=env)
    corpus.mkdir()
    artifacts.mkdir()
    run = subprocess.run([*FRESH_PEAK, sys.executable, str(script), f"-max_total_time={SECONDS}", f"-rss_limit_mb={RSS_LIMIT_MB}",
                          f"-timeout={INPUT_TIMEOUT_S}", f"-artifact_prefix={artifacts}/", str(corpus), str(seeds)],
                         capture_output=True, text=True, timeout=SECONDS + 300, env=env)
    found = sorted(p.name for p in artifacts.iterdir())
    log = "\n".join(line for line in run.stderr.splitlines() if not line.startswith("INFO: Instrumenting"))
    assert run.returncode == 0 and not found, f"{target}: {found}\n{log[-4000:]}"
    assert "DONE" in run.stderr, log[-2000:]  # the run reached its time budget


def test_each_run_removes_the_input_folders_of_runs_gone(tmp_path):
    """libFuzzer ends a run with C's exit(), past Python's atexit, so no run removes the folder of its input
    file (in /dev/shm): the next run removes those of runs no longer alive and keeps the others."""
    sys.path.insert(0, str(FUZZ))
    from common import scratch_folder

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (tmp_path / gone).mkdir()
    (tmp_path / gone / "model.gguf").write_bytes(b"GGUF")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / str(alive.pid)).mkdir()
        (tmp_path / "notes").mkdir()  # no run's folder: not ours to remove
        assert scratch_folder(tmp_path) == tmp_path / str(os.getpid())
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([str(os.getpid()), str(alive.pid), "notes"])
    finally:
        alive.kill()
        alive.wait()
