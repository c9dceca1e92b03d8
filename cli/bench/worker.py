"""One variant in its own process, so its peak RSS is its own; the parent drives it over pipes.

Protocol (one JSON object per line): the worker first answers ``{"ready", "base_rss_bytes",
"load_rss_bytes", "facts"}`` (peak RSS after imports, then after loading the variant; what the loaded
runtime reports of itself, ``runners.Loaded.facts``), then answers each
``{"cmd": "time", "batch", "seq"}`` with ``{"ms"}`` (one run of the runner's job for a full batch of
``seq`` real tokens, no padding; ``runners.RUNNERS``) and ``{"cmd": "measured"}`` with
``{"measured": [...]}`` (the kernel family choices our op library measured in the worker so far, one line each,
``customops.MeasuredShape.describe``) and ``{"cmd": "exit"}`` with ``{"peak_rss_bytes"}``. Failures answer
``{"error"}``.

With TRACE_DIR (``bench --profile``) the session runs with ORT's profiler on, writing into that folder
(the parent's temporary folder, removed by the parent whatever happens): each "time" reply also
carries ``"run"`` (the run's index in the trace) and ``{"cmd": "trace"}`` ends profiling and answers
``{"runs": [one profile.run_summaries entry per run]}``, having deleted the trace file.

    python -m bitnet_onnx.bench.worker FOLDER THREADS RUNNER [TRACE_DIR]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bitnet_onnx.bench.host import peak_rss_bytes
from bitnet_onnx.bench.profile import read_trace, run_summaries
from bitnet_onnx.bench.runners import RUNNERS, Job
from bitnet_onnx.errors import BitnetOnnxError


class Worker:
    """The parent's handle on one worker process."""

    def __init__(self, variant: str, folder: Path, threads: int, runner: str = "onnx", trace_dir: Path | None = None,
                 env: tuple[tuple[str, str], ...] = ()):
        self.variant, self.folder = variant, folder
        cmd = [sys.executable, "-m", "bitnet_onnx.bench.worker", str(folder), str(threads), runner]
        cmd += [str(trace_dir)] if trace_dir is not None else []
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     env={**os.environ, **dict(env)})
        self.info = self._reply()  # base_rss_bytes, load_rss_bytes, facts

    def time_ms(self, batch: int, seq: int) -> float:
        return self.ask(cmd="time", batch=batch, seq=seq)["ms"]

    def profiled_run(self, batch: int, seq: int) -> int:
        """One run in a profiling worker -> its index in the trace."""
        return self.ask(cmd="time", batch=batch, seq=seq)["run"]

    def trace(self) -> list[dict]:
        """A profiling worker's runs (profile.run_summaries), once all runs are done."""
        return self.ask(cmd="trace")["runs"]

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def _reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise BitnetOnnxError(f"{self.folder}: bench worker for {self.variant} exited with code {code}")
        reply = json.loads(line)
        if "error" in reply:
            raise BitnetOnnxError(reply["error"])
        return reply

    def measured_families(self) -> list[str]:
        """The kernel family choices our op library measured in this worker (a variant that runs the library)."""
        return self.ask(cmd="measured")["measured"]

    def close(self) -> dict:
        """Ends the process; returns its last reply (peak_rss_bytes)."""
        reply = self.ask(cmd="exit")
        self.proc.wait()
        return reply

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def serve(folder: Path, threads: int, runner: str, trace_dir: Path | None = None) -> None:
    """The worker process: loads the variant, then answers requests on stdin until "exit"."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the pipe

    def reply(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    try:
        load = RUNNERS[runner].loader()
        base = peak_rss_bytes()
        loaded = load(folder, threads, None if trace_dir is None else str(trace_dir / "ort_profile"))
    except BitnetOnnxError as e:
        reply(error=str(e))
        return
    reply(ready=True, base_rss_bytes=base, load_rss_bytes=peak_rss_bytes(), facts=loaded.facts)
    jobs: dict[tuple[int, int], Job] = {}
    runs = 0
    for line in sys.stdin:
        request = json.loads(line)
        if request["cmd"] == "exit":
            reply(peak_rss_bytes=peak_rss_bytes())
            return
        if request["cmd"] == "measured":
            from bitnet_onnx.customops import dispatch

            reply(measured=[shape.describe() for shape in dispatch().measured])
            continue
        if request["cmd"] == "trace":
            try:
                reply(runs=_end_trace(loaded, runs))
            except BitnetOnnxError as e:
                reply(error=str(e))
            continue
        key = (request["batch"], request["seq"])
        if key not in jobs:
            jobs[key] = loaded.job(*key)
        run = jobs[key]
        start = time.perf_counter()
        run()
        ms = (time.perf_counter() - start) * 1000
        runs += 1
        reply(ms=ms, **({"run": runs - 1} if trace_dir is not None else {}))


def _end_trace(loaded, runs: int) -> list[dict]:
    """Ends the session's profiling -> its runs' summaries; the trace file is deleted."""
    path = Path(loaded.end_profiling())
    try:
        summaries = run_summaries(read_trace(path), where=str(path))
    finally:
        path.unlink(missing_ok=True)
    if len(summaries) != runs:  # ORT drops events past its buffer's limit
        raise BitnetOnnxError(f"{path}: the trace holds {len(summaries)} runs, the worker ran {runs}")
    return summaries


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]) if len(sys.argv) > 4 else None)
