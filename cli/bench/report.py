"""A bench result: its rows (medians and ratios), the text table, JSON, progress lines.

A result is a dict (also written as JSON by ``bench --json``)::

    {"threads", "reps", "onnxruntime", "bitnet_onnx", "cpu",
     "memory_budget_bytes",  # what the runs' activations may take together (None: no limit known)
     "variants": {name: {"file_bytes", "attention", "op_library" (the export needs our op library),
                         "kernels" (those that do: "<ISA>/<family>"),
                         "attention_precision" (fused attention: f32, bf16, or "auto -> f32|bf16"),
                         "inference_precision", "openvino" (the openvino runner's precision and version),
                         "base_rss_bytes", "load_rss_bytes", "peak_rss_bytes",
                         "folder"}},
     "rows": [{"variant", "batch", "seq", "ms_per_batch", "tokens_per_s", "ms_all", "x_<base>"...}
              or {"variant", "batch", "seq", "not_run": why}],  # a run beyond the memory budget
     "unavailable": {name: why},  # default variants this install cannot run (the caller sets it)
     "model",  # a label the caller sets
     "profile": {"reps", "not_profiled": [name...],  # bench --profile only (measure.profile)
                 "rows": [{"variant", "batch", "seq", "runs", "run_ms", "node_ms", "overhead_pct",
                           "groups_pct": {"projections", "attention", "other"}, "ops_pct": {op type: %}}
                          or {"variant", "batch", "seq", "not_run": why}]}}

Profile numbers are medians over a cell's profiled runs (profile.cell_shares): shares of node time
(the kernels' sum; each of groups_pct and ops_pct sums to 100); overhead_pct is the share of run time
outside any kernel; run_ms and node_ms are per run under the profiler (slower than the timed runs:
not comparable with ms_per_batch).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from bitnet_onnx.bench.profile import GROUPS, cell_shares
from bitnet_onnx.bench.variants import ratio_bases
from bitnet_onnx.io import atomic_file, size_text


Cell = tuple[int, int]  # (batch, seq)
NotRun = dict[tuple[str, Cell], str]  # (variant, cell) -> why it was not run


def result_rows(times: dict[tuple[str, Cell], list[float]], variants: list[str], configs: list[Cell],
                not_run: NotRun | None = None) -> list[dict]:
    """One row per (config, variant) from the ms of every repetition: median, tokens/s, ratios (to the
    bases that ran the cell); a (variant, cell) of ``not_run`` gets its reason instead."""
    not_run = not_run or {}
    rows = []
    for batch, seq in configs:
        cell = (batch, seq)
        med = {v: statistics.median(times[(v, cell)]) for v in variants if (v, cell) not in not_run}
        for v in variants:
            if v not in med:
                rows.append({"variant": v, "batch": batch, "seq": seq, "not_run": not_run[(v, cell)]})
                continue
            row = {"variant": v, "batch": batch, "seq": seq, "ms_per_batch": med[v],
                   "tokens_per_s": batch * seq / (med[v] / 1000), "ms_all": times[(v, cell)]}
            for base in ratio_bases():
                if base in med:
                    row[f"x_{base}"] = med[base] / med[v]
            rows.append(row)
    return rows


def format_table(result: dict) -> str:
    """The title lines, one aligned row per (batch, seq, variant) (a run not run: its reason after the
    variant), then a line per unavailable variant."""
    has = {k for r in result["rows"] for k in r if k.startswith("x_")}
    ratios = [f"x_{base}" for base in ratio_bases() if f"x_{base}" in has]
    head = ["batch", "seq", "variant", "ms/batch", "tokens/s"] + [f"x {k[2:]}" for k in ratios]
    head += ["load RSS MB", "peak RSS MB", "file MB", "load/file"]
    lines = []
    for r in result["rows"]:
        mem = result["variants"][r["variant"]]
        cells = [str(r["batch"]), str(r["seq"]), variant_label(r["variant"], mem)]
        if "not_run" in r:
            lines.append([*cells, f"not run: {r['not_run']}"])
            continue
        cells += [_ms(r["ms_per_batch"]), f"{r['tokens_per_s']:.0f}"]
        cells += [f"{r[k]:.2f}" if k in r else "-" for k in ratios]  # "-": that base did not run the cell
        cells += [f"{mem['load_rss_bytes'] / 2**20:.0f}", f"{mem['peak_rss_bytes'] / 2**20:.0f}",
                  f"{mem['file_bytes'] / 2**20:.0f}", f"{mem['load_rss_bytes'] / mem['file_bytes']:.2f}"]
        lines.append(cells)
    unavailable = [f"{v}: unavailable, {why}" for v, why in result.get("unavailable", {}).items()]
    return "\n".join([*header(result), *_columns(head, lines), *unavailable])


def variant_label(name: str, facts: dict) -> str:
    """A variant's name in the tables, with the precision its runtime picked when it reports one."""
    precision = facts.get("inference_precision")
    return f"{name} ({precision})" if precision else name


def _columns(head: list[str], lines: list[list[str]], free_last: bool = False) -> list[str]:
    """The header, its rule and the rows, each column right-aligned to its widest cell. A row shorter
    than the header (a run not run) ends in free text, as does every row with ``free_last``; free text
    counts for no column's width."""
    def is_free(cells: list[str], i: int) -> bool:
        return i == len(cells) - 1 and (free_last or len(cells) < len(head))

    widths = [max([len(h)] + [len(c[i]) for c in lines if i < len(c) and not is_free(c, i)])
              for i, h in enumerate(head)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c if is_free(cells, i) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return [fmt(head), fmt(["-" * w for w in widths]), *(fmt(c) for c in lines)]


def profile_rows(cells: dict[tuple[str, Cell], list[dict]], variants: list[str], configs: list[Cell],
                 not_run: NotRun | None = None) -> list[dict]:
    """One row per (config, variant) from the run summaries (profile.run_summaries) of its profiled runs;
    a (variant, cell) of ``not_run`` gets its reason instead."""
    not_run = not_run or {}
    rows = []
    for batch, seq in configs:
        for v in variants:
            key = (v, (batch, seq))
            shares = {"not_run": not_run[key]} if key in not_run else cell_shares(cells[key])
            rows.append({"variant": v, "batch": batch, "seq": seq, **shares})
    return rows


PROFILE_OPS_NAMED = 6  # the table names the largest op types (of at least 1% of node time); the rest are summed


def format_profile_table(result: dict) -> str:
    """The profile's title lines and one aligned row per (batch, seq, variant): group shares, overhead,
    the largest op types (JSON has them all)."""
    profile = result["profile"]
    title = [f"op-type shares, ONNX Runtime profiler: {profile['reps']} profiled runs per cell in sessions of "
             "their own (untimed), medians over the runs",
             "% of node time (the kernels' sum); overhead = % of run time outside kernels"]
    if profile["not_profiled"]:
        title.append(f"not profiled (not an ONNX Runtime session): {', '.join(profile['not_profiled'])}")
    head = ["batch", "seq", "variant", *(f"{g} %" for g in GROUPS), "overhead %", "op types (% of node time)"]
    lines = [[str(r["batch"]), str(r["seq"]), r["variant"], f"not run: {r['not_run']}"] if "not_run" in r else
             [str(r["batch"]), str(r["seq"]), r["variant"], *(f"{r['groups_pct'][g]:.1f}" for g in GROUPS),
              f"{r['overhead_pct']:.1f}", _op_shares(r["ops_pct"])] for r in profile["rows"]]
    return "\n".join([*title, *_columns(head, lines, free_last=True)])


def _op_shares(ops_pct: dict[str, float]) -> str:
    """"Op 81.2, Op 9.0, 12 others 9.8": the PROFILE_OPS_NAMED largest op types of at least 1%, then the rest."""
    largest = sorted(ops_pct.items(), key=lambda item: -item[1])[:PROFILE_OPS_NAMED]
    named = [(op, pct) for op, pct in largest if pct >= 1.0]
    parts = [f"{op} {pct:.1f}" for op, pct in named]
    if len(ops_pct) > len(named):
        parts.append(f"{len(ops_pct) - len(named)} others {sum(ops_pct.values()) - sum(p for _, p in named):.1f}")
    return ", ".join(parts)


def header(result: dict) -> list[str]:
    """The lines above the columns: what ran, where, how it was measured, how each variant was exported."""
    title = [f"model: {result.get('model', '?')}", f"threads {result['threads']}",
             f"median of {result['reps']} interleaved reps", f"onnxruntime {result['onnxruntime']}", result["cpu"]]
    lines = [" | ".join(title)]
    attention = _grouped(result["variants"], "attention")
    if attention:
        lines.append(f"attention: {attention}")
    kernels = _grouped(result["variants"], "kernels")
    if kernels:
        lines.append(f"op kernels (ISA/family, measure = timed on this host per shape): {kernels}")
    precision = _grouped(result["variants"], "attention_precision")
    if precision:
        lines.append(f"EncoderAttention precision (auto = the op library's choice on this host): {precision}")
    inference = _grouped(result["variants"], "inference_precision")
    if inference:
        versions = ", ".join(sorted({f["openvino"] for f in result["variants"].values() if f.get("openvino")}))
        lines.append(f"OpenVINO {versions} at its default inference precision on this CPU "
                     f"(the compiled model's INFERENCE_PRECISION_HINT): {inference}")
    if any("not_run" in r for r in result["rows"]):
        lines.append(f"memory budget: {size_text(result['memory_budget_bytes'])} for the runs' activations, "
                     "all workers together (each keeps its largest run's); runs beyond it are not run")
    for v, facts in result["variants"].items():  # the op's own choice per shape (docs/op.md, "Kernel families")
        if facts.get("measured_families"):
            lines.append(f"kernel families measured by {v}: " + "; ".join(facts["measured_families"]))
    return lines


def _grouped(variants: dict[str, dict], fact: str) -> str:
    """A per-variant fact as "value (variant, ...), ...", in variant order; "" when no variant has it."""
    groups: dict[str, list[str]] = {}
    for name, facts in variants.items():
        if facts.get(fact) is not None:
            groups.setdefault(str(facts[fact]), []).append(name)
    return ", ".join(f"{value} ({', '.join(names)})" for value, names in groups.items())


def _ms(ms: float) -> str:
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}" if ms >= 0.1 else f"{ms:.3f}"


def export_facts(folder: Path) -> dict:
    """What the table shows of an exported folder besides timings: its size and its manifest's choices
    (each fact named in ``header`` gets a header line)."""
    from bitnet_onnx.manifest import Manifest

    manifest = Manifest.read(folder)
    return {"file_bytes": model_bytes(folder), "attention": manifest.attention,
            "attention_precision": manifest.attention_precision if manifest.attention == "fused" else None,
            "op_library": manifest.needs_custom_ops}


def model_bytes(folder: Path) -> int:
    """Size of an export's model file and its external data (everything in the folder but tokenizer/manifest)."""
    from bitnet_onnx.manifest import Manifest

    manifest = Manifest.read(folder)
    model = folder / manifest.model_file
    total = model.stat().st_size
    try:
        import onnx
        from onnx.external_data_helper import ExternalDataInfo, uses_external_data

        proto = onnx.load(str(model), load_external_data=False)
        files = {ExternalDataInfo(t).location for t in proto.graph.initializer if uses_external_data(t)}
        total += sum((folder / f).stat().st_size for f in files)
    except Exception:  # unreadable here means the session would fail too; the worker reports it
        pass
    return total


def write_json(path: Path, data: dict) -> None:
    with atomic_file(path, "--json") as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def progress(message: str) -> None:
    """A progress line on stderr (stdout holds the table)."""
    print(message, file=sys.stderr, flush=True)
