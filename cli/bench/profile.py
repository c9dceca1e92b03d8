"""ONNX Runtime's profiler trace -> time per op type of every run, for ``bench --profile``.

ORT (SessionOptions.enable_profiling) writes one JSON list of Chrome-trace events per session at
``end_profiling()``: a "Session" event "model_run" per ``session.run`` and a "Node" event per kernel
call ("<node>_kernel_time", its op type in args["op_name"]). A node belongs to the run whose
interval holds its start; node time is the sum of its kernels; a run's time not spent in kernels
(the executor, input/output copies, allocation) is its overhead.

Each op type falls in one group, so the projections' share is one number whichever form a variant's
graph takes (``group_of``); the MatMuls of two activations (the stock attention's) are counted apart,
as "MatMul (attention)", from the MatMuls by a weight.
"""

from __future__ import annotations

import bisect
import json
import statistics
from pathlib import Path

from bitnet_onnx.errors import BitnetOnnxError

GROUPS = ("projections", "attention", "other")
# The projections of every variant: ours, MatMulNBits (nbits), MatMulIntegerToFloat (int8), and what
# ORT makes of quantize_dynamic's graph (ort-int8: DynamicQuantizeMatMul, or its unfused parts)
PROJECTION_OPS = frozenset({"I2STernaryMatMul", "MatMulNBits", "MatMulIntegerToFloat", "MatMulInteger",
                            "DynamicQuantizeMatMul", "DynamicQuantizeLinear", "QLinearMatMul"})
# Fused attention cores (ours, com.microsoft's) and the stock decomposition's Softmax
ATTENTION_OPS = frozenset({"EncoderAttention", "Attention", "MultiHeadAttention", "GroupQueryAttention", "Softmax"})
# Projections when multiplying by a weight (f32, f16), attention when multiplying two activations
# (the decomposition's scores and context products)
MATMUL_OPS = frozenset({"MatMul", "FusedMatMul", "Gemm"})
ACTIVATIONS_MATMUL = " (attention)"  # the suffix of an op key of MATMUL_OPS multiplying two activations
FENCE_SUFFIXES = ("_fence_before", "_fence_after")  # older ORT versions: zero-length markers around kernels


def op_key(op: str, input_shapes: list) -> str:
    """The op type of one kernel call, a MatMul of two activations marked ACTIVATIONS_MATMUL. ORT lists
    the shapes of a node's activation inputs (a constant weight is left out), so a MatMul with two
    listed inputs of rank >= 3 multiplies activations."""
    if op in MATMUL_OPS:
        ranks = [len(next(iter(s.values()), [])) for s in input_shapes if isinstance(s, dict)]
        if len(ranks) >= 2 and min(ranks) >= 3:
            return op + ACTIVATIONS_MATMUL
    return op


def group_of(key: str) -> str:
    """The group of an op key (``op_key``)."""
    if key in PROJECTION_OPS or key in MATMUL_OPS:
        return "projections"
    if key in ATTENTION_OPS or key.endswith(ACTIVATIONS_MATMUL):
        return "attention"
    return "other"


def read_trace(path: str | Path) -> list[dict]:
    """The events of an ORT profile file; a file that is not ORT's trace raises naming it."""
    try:
        events = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BitnetOnnxError(f"{path}: not a readable ONNX Runtime profile ({e})") from None
    if not isinstance(events, list):
        raise BitnetOnnxError(f"{path}: not an ONNX Runtime profile (expected a JSON list of events)")
    return events


def run_summaries(events: list[dict], where: str = "profile") -> list[dict]:
    """One summary per "model_run", in run order: {"run_us", "node_us", "ops_us": {op key: us}}
    (microseconds, as ORT records them; op keys: ``op_key``)."""
    runs = sorted((e for e in events if _is(e, "Session") and e.get("name") == "model_run"), key=lambda e: e["ts"])
    starts = [r["ts"] for r in runs]
    summaries = [{"run_us": r["dur"], "node_us": 0, "ops_us": {}} for r in runs]
    for e in events:
        if not _is(e, "Node") or str(e.get("name", "")).endswith(FENCE_SUFFIXES):
            continue
        args = e.get("args")
        if not isinstance(args, dict) or "op_name" not in args:
            continue
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if i < 0 or e["ts"] > runs[i]["ts"] + runs[i]["dur"]:
            continue  # outside every run (none are expected; session start-up work is not a run)
        run, key = summaries[i], op_key(str(args["op_name"]), args.get("input_type_shape") or [])
        run["node_us"] += e["dur"]
        run["ops_us"][key] = run["ops_us"].get(key, 0) + e["dur"]
    for n, run in enumerate(summaries):
        if run["node_us"] == 0:
            raise BitnetOnnxError(f"{where}: run {n + 1} of {len(runs)} has no node events "
                                  "(has ORT's trace format changed?)")
    return summaries


def _is(event, category: str) -> bool:
    """A complete event of ``category`` with numeric start and duration."""
    return (isinstance(event, dict) and event.get("cat") == category and isinstance(event.get("ts"), (int, float))
            and isinstance(event.get("dur"), (int, float)))


def cell_shares(runs: list[dict]) -> dict:
    """The summaries of one cell's runs -> its row's numbers, from medians over the runs (a run slowed by
    another job on the machine moves a median less than a sum): each op key's median time as a share
    of the sum of those medians (so they sum to 100), the groups' shares as the sums of their op keys',
    the median run's overhead (its time outside kernels, % of its time), and the median profiled ms
    per run and node ms per run (slowed by the profiler)."""
    keys = {op for r in runs for op in r["ops_us"]}
    ops = {op: statistics.median(r["ops_us"].get(op, 0) for r in runs) for op in keys}
    total = sum(ops.values())
    groups = {g: sum(us for op, us in ops.items() if group_of(op) == g) for g in GROUPS}
    return {"runs": len(runs), "run_ms": statistics.median(r["run_us"] for r in runs) / 1000,
            "node_ms": statistics.median(r["node_us"] for r in runs) / 1000,
            "overhead_pct": statistics.median(_overhead_pct(r) for r in runs),
            "groups_pct": {g: 100 * us / total for g, us in groups.items()},
            "ops_pct": {op: 100 * us / total for op, us in sorted(ops.items(), key=lambda item: (-item[1], item[0]))}}


def _overhead_pct(run: dict) -> float:
    """A run's time outside kernels, % of its time."""
    return 100 * max(run["run_us"] - run["node_us"], 0) / run["run_us"] if run["run_us"] else 0.0
