"""``measure``: every variant's export timed on every (batch, seq), each in its own worker process.

The workers stay loaded side by side and the parent asks them in turn for one timed run
(``timing.interleave``); each (variant, shape) of up to WARMUP_MAX_TOKENS tokens first gets a
discarded warm-up run. The result (see ``report``) holds medians and ratios from this one run.

``profile`` (``bench --profile``) runs the same cells again, after the timed runs and in workers of its
own whose sessions have ORT's profiler on (it slows every kernel call: never timed), and returns each
cell's shares of time per op type.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from bitnet_onnx import __version__
from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.bench.report import profile_rows, result_rows
from bitnet_onnx.bench.runners import RUNNERS
from bitnet_onnx.bench.timing import interleave
from bitnet_onnx.bench.variants import VARIANTS
from bitnet_onnx.bench.worker import Worker

WARMUP_MAX_TOKENS = 4096  # bigger cells skip the warm-up run: seconds of compute dwarf first-run costs


def measure(folders: dict[str, Path], configs: list[tuple[int, int]], threads: int, reps: int,
            log: Callable[[str], None] | None = None) -> dict:
    """{variant name: its built folder} on every (batch, seq) -> the result dict (no "model" label yet)."""
    import onnxruntime as ort

    workers: dict[str, Worker] = {}
    try:
        for v, folder in folders.items():
            workers[v] = Worker(v, folder, threads, VARIANTS[v].runner, env=VARIANTS[v].env)
        times = interleave(list(workers), configs, reps, lambda v, cell: workers[v].time_ms(*cell),
                           warm_up=lambda cell: cell[0] * cell[1] <= WARMUP_MAX_TOKENS, log=log)
        peaks = {v: w.close()["peak_rss_bytes"] for v, w in workers.items()}
    finally:
        for w in workers.values():
            w.kill()
    variants = {}
    for v, f in folders.items():
        facts = RUNNERS[VARIANTS[v].runner].facts(f)
        variants[v] = {**facts, **op_kernels(facts, VARIANTS[v].env),
                       "base_rss_bytes": workers[v].info["base_rss_bytes"],
                       "load_rss_bytes": workers[v].info["load_rss_bytes"], "peak_rss_bytes": peaks[v],
                       "folder": str(f)}
    return {"threads": threads, "reps": reps, "onnxruntime": ort.__version__, "bitnet_onnx": __version__,
            "cpu": cpu_name(), "variants": variants, "rows": result_rows(times, list(folders), configs)}


def op_kernels(facts: dict, env: tuple[tuple[str, str], ...]) -> dict:
    """{"kernels": "<ISA>/<family>"} for an export whose graph runs our op library (its runner's facts
    say "op_library"), as its worker's environment (this one's plus the variant's ``env``) selects
    them; family "auto" is the op's per-call rule table (docs/op.md, "Kernel families"). {} otherwise.
    An export whose EncoderAttention nodes say precision "auto" also gets "attention_precision":
    "auto -> f32|bf16", what the library resolves it to in that environment."""
    from bitnet_onnx.customops import attention_auto_precision, selected_isa, selected_kernel_family

    if not facts.get("op_library"):
        return {}
    environ = {**os.environ, **dict(env)}
    kernels = {"kernels": f"{selected_isa(environ)}/{selected_kernel_family(environ)}"}
    if facts.get("attention_precision") == "auto":  # the library's answer for the worker's environment
        kernels["attention_precision"] = f"auto -> {attention_auto_precision(environ)}"
    return kernels


def profile(folders: dict[str, Path], configs: list[tuple[int, int]], threads: int, reps: int,
            log: Callable[[str], None] | None = None) -> dict:
    """{variant name: its built folder} on every (batch, seq), profiled -> the result's "profile" entry
    (report.profile_rows). Variants whose runner is not an ORT session are listed as not profiled.

    The traces ORT writes go to a temporary folder, removed here even when a worker fails or is killed.
    """
    names = [v for v in folders if RUNNERS[VARIANTS[v].runner].profiles]
    with tempfile.TemporaryDirectory(prefix="bitnet-onnx-profile-") as traces:
        workers: dict[str, Worker] = {}
        try:
            if log:
                log(f"bench: profiling {', '.join(names)} in sessions of their own ...")
            for v in names:
                (Path(traces) / v).mkdir()  # one folder per worker: ORT names its file by the time only
                workers[v] = Worker(v, folders[v], threads, VARIANTS[v].runner, trace_dir=Path(traces) / v,
                                    env=VARIANTS[v].env)
            run_index = interleave(names, configs, reps, lambda v, cell: workers[v].profiled_run(*cell),
                                   warm_up=lambda cell: cell[0] * cell[1] <= WARMUP_MAX_TOKENS, log=log)
            runs = {v: w.trace() for v, w in workers.items()}
            for w in workers.values():
                w.close()
        finally:
            for w in workers.values():
                w.kill()
    cells = {(v, cell): [runs[v][i] for i in run_index[(v, cell)]] for v in names for cell in configs}
    return {"reps": reps, "rows": profile_rows(cells, names, configs),
            "not_profiled": [v for v in folders if v not in names]}
