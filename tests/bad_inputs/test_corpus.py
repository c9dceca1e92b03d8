"""Runs every case of tests/bad_inputs/cases.py in a fresh workspace and a process of its own: a fork of
the session's pre-imported server (fork_server.py), or a cold interpreter for a ``cold`` case.

Asserted for each: the exit status; on failure exactly one line on stderr, matching the case's
regex (which names the culprit; for a signal, "interrupted by SIGNAME"); every input byte-for-byte
unchanged; nothing left behind (no new entry, hidden temp files included) but what the case
``creates``. ``check_case`` is the whole check, for other files of cases (test_hostile_files.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import child_signals
from cases import CASES, CLASSES, Case, Workspace
from fork_server import ForkServer

HOLD = Path(__file__).with_name("hold.py")
WAIT_SECONDS = 60


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (symlinks not followed) -> its kind, mode and content hash or target."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", st.st_mode & 0o7777)
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", st.st_mode & 0o7777, hashlib.sha256(path.read_bytes()).hexdigest())
            else:  # a FIFO of a case: opening it would block this test
                found[rel] = (stat.filemode(st.st_mode), st.st_ino)
    return found


def _rlimits(case: Case) -> dict[int, tuple[int, int]]:
    limits = {}
    if case.fsize is not None:
        limits[resource.RLIMIT_FSIZE] = (case.fsize, case.fsize)
    if case.memory is not None:
        limits[resource.RLIMIT_AS] = (case.memory, case.memory)
    return limits


def _limits(case: Case):
    def apply() -> None:
        child_signals.reset_to_default()  # the signal cases stop runs that a launcher's ignore would shield
        if case.fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG instead
        for which, limits in _rlimits(case).items():
            resource.setrlimit(which, limits)
        if case.umask is not None:
            os.umask(case.umask)
    return apply


def _start(case: Case, args: list[str], ws: Workspace, err, fork_server: ForkServer | None):
    """``python ARGS`` in the workspace with the case's stdin, rlimits and umask and the default signal
    dispositions: forked from the server (which ignores SIGXFSZ as CPython does at start), or cold (a
    ``cold`` case, or no server)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    stdin = subprocess.PIPE if case.stdin is not None else subprocess.DEVNULL
    if case.cold or fork_server is None:
        return subprocess.Popen([sys.executable, *args], cwd=ws.root, env=env, preexec_fn=_limits(case), stdin=stdin,
                                stdout=subprocess.DEVNULL, stderr=err)
    return fork_server.popen(args, cwd=ws.root, env=env, stdin=stdin, stderr=err, umask=case.umask,
                             rlimits=_rlimits(case))


def _wait_for(where: Workspace | Path, pattern: str, procs: list, count: int) -> None:
    folder = where.root if isinstance(where, Workspace) else where
    deadline = time.monotonic() + WAIT_SECONDS
    while len(list(folder.glob(pattern))) < count:
        finished = [p for p in procs if p.poll() is not None]
        assert not finished, f"exited (status {finished[0].returncode}) before its temp output {pattern} appeared"
        assert time.monotonic() < deadline, f"no {pattern} after {WAIT_SECONDS} s"
        time.sleep(0.01)


def run(case: Case, ws: Workspace, logs: Path, fork_server: ForkServer | None = None) -> list[tuple[int, str]]:
    """(exit status, stderr) of each run of the case."""
    argv = [ws.format(a) for a in case.argv]
    go = logs / "go"
    args = [str(HOLD), case.hold, str(go), *argv] if case.hold else ["-m", "bitnet_onnx", *argv]
    procs, errs = [], []
    for i in range(case.runs):
        err = open(logs / f"stderr-{i}", "w+b")
        errs.append(err)
        procs.append(_start(case, args, ws, err, fork_server))
    try:
        if case.stdin is not None:
            for p in procs:
                try:
                    p.stdin.write(case.stdin)
                    p.stdin.close()
                except BrokenPipeError:
                    pass
        if case.wait_for or case.wait_held:
            if case.wait_held:
                _wait_for(logs, go.name + ".held", procs, 1)
            else:
                _wait_for(ws, case.wait_for, procs, case.runs)
            if case.signal is not None:
                for p in procs:
                    p.send_signal(case.signal)
            else:
                if case.meanwhile is not None:
                    case.meanwhile(ws)
                go.touch()
        results = []
        for p, err in zip(procs, errs):
            p.wait(timeout=case.timeout)
            err.seek(0)
            results.append((p.returncode, err.read().decode("utf-8", "replace")))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for err in errs:
            err.close()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, fork_server, corpus_sources, tmp_path):
    check_case(case, corpus_sources, tmp_path, fork_server)


def check_case(case: Case, corpus_sources: dict[str, Path], tmp_path: Path,
               fork_server: ForkServer | None = None) -> None:
    """Runs ``case`` in a fresh workspace under ``tmp_path`` and asserts all the corpus promises; its
    runs fork from ``fork_server`` unless the case is ``cold`` (without a server, every case is)."""
    ws = Workspace(tmp_path / "ws", corpus_sources)
    ws.root.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    for arg in case.argv:  # copies in what the argv names, before the state is taken
        ws.format(arg)
    if case.setup is not None:
        case.setup(ws)
    before = tree(ws.root)

    results = run(case, ws, logs, fork_server)

    allowed = case.status if isinstance(case.status, tuple) else (case.status,)
    statuses = [status for status, _ in results]
    if case.runs > 1:  # concurrent writers: exactly one wins
        assert Counter(statuses) == Counter({0: 1, 1: case.runs - 1}), results
    for status, stderr in results:
        assert status in allowed, f"exit status {status}, expected {allowed}; stderr:\n{stderr}"
        assert "Traceback" not in stderr, stderr
        lines = [line for line in stderr.splitlines() if line.strip()]
        if status != 0:
            error = case.error if case.signal is None else rf"^bitnet-onnx \S+: interrupted by {case.signal.name}$"
            assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
            assert re.search(error, lines[0]), f"{lines[0]!r} does not match {error!r}"

    after = tree(ws.root)
    def ours(rel: str) -> bool:  # made by the run (on success) or by the case (meanwhile)
        return any(rel == c or rel.startswith(c + "/") for c in case.creates)

    changed = sorted(rel for rel in before if after.get(rel) != before[rel] and not ours(rel))
    assert not changed, f"inputs changed or removed: {changed}"
    left = sorted(rel for rel in after if rel not in before and not ours(rel))
    assert not left, f"left behind: {left}"
    if case.check is not None:
        case.check(ws)


def test_corpus_covers_every_class():
    counts = Counter(c.cls for c in CASES)
    assert set(counts) == set(CLASSES), counts
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"
