"""A bench result: its rows (medians and ratios), the text table, JSON, progress lines.

A result is a dict (also written as JSON by ``bench --json``)::

    {"threads", "reps", "onnxruntime", "bitnet_onnx", "cpu",
     "variants": {name: {"file_bytes", "attention", "base_rss_bytes", "load_rss_bytes", "peak_rss_bytes",
                         "folder"}},
     "rows": [{"variant", "batch", "seq", "ms_per_batch", "tokens_per_s", "ms_all", "x_<base>"...}],
     "model"}  # a label the caller sets
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from bitnet_onnx.bench.variants import ratio_bases
from bitnet_onnx.io import atomic_file


def result_rows(times: dict[tuple[str, tuple[int, int]], list[float]], variants: list[str],
                configs: list[tuple[int, int]]) -> list[dict]:
    """One row per (config, variant) from the ms of every repetition: median, tokens/s, ratios."""
    rows = []
    for batch, seq in configs:
        med = {v: statistics.median(times[(v, (batch, seq))]) for v in variants}
        for v in variants:
            row = {"variant": v, "batch": batch, "seq": seq, "ms_per_batch": med[v],
                   "tokens_per_s": batch * seq / (med[v] / 1000), "ms_all": times[(v, (batch, seq))]}
            for base in ratio_bases():
                if base in med:
                    row[f"x_{base}"] = med[base] / med[v]
            rows.append(row)
    return rows


def format_table(result: dict) -> str:
    """The title line and one aligned row per (batch, seq, variant)."""
    has = {k for r in result["rows"] for k in r if k.startswith("x_")}
    ratios = [f"x_{base}" for base in ratio_bases() if f"x_{base}" in has]
    head = ["batch", "seq", "variant", "ms/batch", "tokens/s"] + [f"x {k[2:]}" for k in ratios]
    head += ["load RSS MB", "peak RSS MB", "file MB", "load/file"]
    lines = []
    for r in result["rows"]:
        mem = result["variants"][r["variant"]]
        cells = [str(r["batch"]), str(r["seq"]), r["variant"], _ms(r["ms_per_batch"]), f"{r['tokens_per_s']:.0f}"]
        cells += [f"{r[k]:.2f}" for k in ratios]
        cells += [f"{mem['load_rss_bytes'] / 2**20:.0f}", f"{mem['peak_rss_bytes'] / 2**20:.0f}",
                  f"{mem['file_bytes'] / 2**20:.0f}", f"{mem['load_rss_bytes'] / mem['file_bytes']:.2f}"]
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([*header(result), fmt(head), fmt(["-" * w for w in widths]), *(fmt(c) for c in lines)])


def header(result: dict) -> list[str]:
    """The lines above the columns: what ran, where, how it was measured, how each variant was exported."""
    title = [f"model: {result.get('model', '?')}", f"threads {result['threads']}",
             f"median of {result['reps']} interleaved reps", f"onnxruntime {result['onnxruntime']}", result["cpu"]]
    lines = [" | ".join(title)]
    attention = _grouped(result["variants"], "attention")
    if attention:
        lines.append(f"attention: {attention}")
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

    return {"file_bytes": model_bytes(folder), "attention": Manifest.read(folder).attention}


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
