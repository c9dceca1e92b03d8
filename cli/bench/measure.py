"""``measure``: every variant's export timed on every (batch, seq), each in its own worker process.

The workers stay loaded side by side and the parent asks them in turn for one timed run
(``timing.interleave``); each (variant, shape) of up to WARMUP_MAX_TOKENS tokens first gets a
discarded warm-up run. The result (see ``report``) holds medians and ratios from this one run.

``profile`` (``bench --profile``) runs the same cells again, after the timed runs and in workers of its
own whose sessions have ORT's profiler on (it slows every kernel call: never timed), and returns each
cell's shares of time per op type.

Both run a (variant, cell) only when its activations fit the memory budget (``refused_runs``): the
export's cost model (``Manifest.batch_bytes``, an upper bound) says what a run needs, and every worker
keeps the memory of its largest run (ORT's arena keeps what it grew to), so the workers' largest runs
must fit together. A run that does not is reported with what it would need, never started: the stock
attention's [batch, heads, S, S] scores at 8192 tokens need more than many hosts have, and an
out-of-memory kill would end the whole bench.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from bitnet_onnx.bench.host import available_memory_bytes, cpu_name
from bitnet_onnx.bench.report import Cell, NotRun, profile_rows, result_rows
from bitnet_onnx.bench.runners import RUNNERS
from bitnet_onnx.bench.timing import interleave
from bitnet_onnx.bench.variants import variant
from bitnet_onnx.bench.worker import Worker
from bitnet_onnx.io import size_text
from bitnet_onnx.version import __version__

WARMUP_MAX_TOKENS = 4096  # bigger cells skip the warm-up run: seconds of compute dwarf first-run costs
# The default memory budget's share of what the system has available once the workers are loaded: the
# rest is headroom for other processes and for what the cost model leaves out (allocator slack, the
# runtime's own buffers).
AVAILABLE_SHARE = 0.8
RunCost = tuple[int, bool]  # (bytes of one run's activations, whether they hold the stock attention's scores)


def measure(folders: dict[str, Path], configs: list[Cell], threads: int, reps: int,
            log: Callable[[str], None] | None = None, memory_budget: int | None = None) -> dict:
    """{variant name: its built folder} on every (batch, seq) -> the result dict (no "model" label yet).
    ``memory_budget``: bytes the runs' activations may take, all workers together (None: AVAILABLE_SHARE
    of the memory available once the workers are loaded)."""
    import onnxruntime as ort

    workers: dict[str, Worker] = {}
    try:
        for v, folder in folders.items():
            workers[v] = Worker(v, folder, threads, variant(v).runner, env=variant(v).env)
        budget = memory_budget if memory_budget is not None else default_memory_budget()
        refused = refused_runs(run_costs(folders, configs), budget)
        _log_refused(refused, log)
        times = interleave(list(workers), configs, reps, lambda v, cell: workers[v].time_ms(*cell),
                           warm_up=lambda cell: cell[0] * cell[1] <= WARMUP_MAX_TOKENS, log=log,
                           include=lambda v, cell: (v, cell) not in refused)
        facts = {v: RUNNERS[variant(v).runner].facts(f) for v, f in folders.items()}
        measured = {v: {"measured_families": w.measured_families()} for v, w in workers.items()
                    if facts[v].get("op_library")}
        peaks = {v: w.close()["peak_rss_bytes"] for v, w in workers.items()}
    finally:
        for w in workers.values():
            w.kill()
    variants = {}
    for v, f in folders.items():
        variants[v] = {**facts[v], **op_kernels(facts[v], variant(v).env), **workers[v].info.get("facts", {}),
                       **measured.get(v, {}),
                       "base_rss_bytes": workers[v].info["base_rss_bytes"],
                       "load_rss_bytes": workers[v].info["load_rss_bytes"], "peak_rss_bytes": peaks[v],
                       "folder": str(f)}
    return {"threads": threads, "reps": reps, "onnxruntime": ort.__version__, "bitnet_onnx": __version__,
            "cpu": cpu_name(), "memory_budget_bytes": budget, "variants": variants,
            "rows": result_rows(times, list(folders), configs, refused)}


def default_memory_budget() -> int | None:
    """AVAILABLE_SHARE of the memory available now; None (no limit) where the system does not say."""
    available = available_memory_bytes()
    return None if available is None else int(AVAILABLE_SHARE * available)


def run_costs(folders: dict[str, Path], configs: list[Cell]) -> dict[tuple[str, Cell], RunCost | None]:
    """{(variant, cell): (bytes of one run's activations by the export's cost model, whether they hold
    the stock attention's [batch, heads, S, S] scores)}; None for a folder without our manifest's cost
    model (llama.cpp's file: its runtime sizes its own context)."""
    from bitnet_onnx.manifest import MANIFEST_NAME, Manifest

    costs = {}
    for v, folder in folders.items():
        manifest = Manifest.read(folder) if (folder / MANIFEST_NAME).is_file() else None
        for batch, seq in configs:
            need = manifest.batch_bytes(batch, seq) if manifest else None
            costs[(v, (batch, seq))] = None if need is None else (need, bool(manifest.attention_bytes_per_token_pair))
    return costs


def refused_runs(costs: dict[tuple[str, Cell], RunCost | None], budget: int | None) -> NotRun:
    """The (variant, cell)s not to run -> why. Each worker keeps its largest run's memory, so runs are
    accepted smallest first while the workers' largest accepted runs sum to at most ``budget``
    (None: every run is accepted); a run without a cost (None) is always accepted."""
    if budget is None:
        return {}
    largest: dict[str, int] = {v: 0 for v, _ in costs}
    refused = {}
    runs = sorted(((key, cost) for key, cost in costs.items() if cost is not None),
                  key=lambda run: run[1][0])  # stable: table order among equal costs
    for (v, cell), (need, scores) in runs:
        left = budget - (sum(largest.values()) - largest[v])  # what this worker may grow to
        if need <= left:
            largest[v] = max(largest[v], need)
            continue
        what = " (the stock attention's [batch, heads, S, S] scores)" if scores else ""
        refused[(v, cell)] = (f"cannot hold it: needs up to {size_text(need)} of activations{what} by the "
                              f"export's cost model, {size_text(max(left, 0))} of the {size_text(budget)} "
                              "memory budget left")
    return refused


def _log_refused(refused: NotRun, log: Callable[[str], None] | None) -> None:
    for (v, (batch, seq)), why in refused.items():
        if log:
            log(f"bench: {v} at {batch}x{seq} not run: {why}")


def op_kernels(facts: dict, env: tuple[tuple[str, str], ...]) -> dict:
    """{"kernels": "<ISA>/<family>"} for an export whose graph runs our op library (its runner's facts
    say "op_library"), as its worker's environment (this one's plus the variant's ``env``) selects
    them; family "measure" is the op's choice timed on this host per shape (docs/op.md, "Kernel families"). {}
    otherwise.
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


def profile(folders: dict[str, Path], configs: list[Cell], threads: int, reps: int,
            log: Callable[[str], None] | None = None, memory_budget: int | None = None) -> dict:
    """{variant name: its built folder} on every (batch, seq), profiled -> the result's "profile" entry
    (report.profile_rows). Variants whose runner is not an ORT session are listed as not profiled;
    runs beyond the memory budget are not run (as in ``measure``).

    The traces ORT writes go to a temporary folder, removed here even when a worker fails or is killed.
    """
    names = [v for v in folders if RUNNERS[variant(v).runner].profiles]
    with tempfile.TemporaryDirectory(prefix="bitnet-onnx-profile-") as traces:
        workers: dict[str, Worker] = {}
        try:
            if log:
                log(f"bench: profiling {', '.join(names)} in sessions of their own ...")
            for v in names:
                (Path(traces) / v).mkdir()  # one folder per worker: ORT names its file by the time only
                workers[v] = Worker(v, folders[v], threads, variant(v).runner, trace_dir=Path(traces) / v,
                                    env=variant(v).env)
            budget = memory_budget if memory_budget is not None else default_memory_budget()
            refused = refused_runs(run_costs({v: folders[v] for v in names}, configs), budget)
            _log_refused(refused, log)
            run_index = interleave(names, configs, reps, lambda v, cell: workers[v].profiled_run(*cell),
                                   warm_up=lambda cell: cell[0] * cell[1] <= WARMUP_MAX_TOKENS, log=log,
                                   include=lambda v, cell: (v, cell) not in refused)
            runs = {v: w.trace() for v, w in workers.items()}
            for w in workers.values():
                w.close()
        finally:
            for w in workers.values():
                w.kill()
    cells = {(v, cell): [runs[v][i] for i in run_index[(v, cell)]] for v in names for cell in configs}
    return {"reps": reps, "rows": profile_rows(cells, names, configs, refused),
            "not_profiled": [v for v in folders if v not in names]}
