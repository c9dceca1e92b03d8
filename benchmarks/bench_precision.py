"""Retrieval check of the output precisions (docs/precision.md) for a model and texts you name:
bytes per vector, the encode time quantization adds, and how much of float32 search's top-10 binary
search keeps, alone and with int8 / float32 rescoring.

    python benchmarks/bench_precision.py --export DIR --corpus docs.txt --queries queries.txt
    python benchmarks/bench_precision.py --gguf model.gguf --pooling mean      # exported once (f32)
    python benchmarks/bench_precision.py --shape qwen3-0.6b                    # random weights: geometry only
        [--dimensions 1024,256] [--k 10] [--rescore 4] [--docs 2000] [--nqueries 200]
        [--threads 1] [--reps 5] [--json out.json]

Texts: --corpus / --queries are text files, one text per line; without them the paragraphs of
Python's own standard-library docstrings (local, no download): every paragraph of 8+ words is a
document, and --nqueries of them, set apart, give their first sentence as a query. The int8 ranges
are calibrated on the first half of the documents (``Embedder.calibrate``), as a user would on a
sample. Search is exhaustive (numpy), per query:

- float32: cosine of float32 vectors (the reference top-k; every precision quantizes the L2-normalized
  vectors, ``encode(normalize=True)``);
- int8: float32 query . int8 documents; ubinary: Hamming distance of the packed bits;
- ubinary -> int8 / float32: the --rescore x k nearest by Hamming distance, re-ranked by the float32
  query against the candidates' int8 (or float32) vectors, the recipe of docs/precision.md.

"top-k overlap" is |approximate top-k & float32 top-k| / k, averaged over queries. "sign agreement"
is the mean over dimensions of the share of documents on the majority side of 0: 0.5 when every bit
splits the corpus in half, 1.0 when all documents share the same bits. Encode cost:
medians of interleaved repetitions of ``Embedder.encode`` on 64 documents in float32 and in each
precision (same texts, same threads), printed as the ratio to float32 in the same repetition.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import pkgutil
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bitnet_onnx import Embedder
from bitnet_onnx.bench.cache import cache_dir, cached_export, shape_model
from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.bench.timing import interleave
from bitnet_onnx.customops import selected_isa
from bitnet_onnx.precision import NAMES, PRECISIONS, calibration_ranges, quantize
from bitnet_onnx.st_modules import L2_NORM_EPS

_WORDS = re.compile(r"\w+")


def stdlib_paragraphs(limit: int) -> list[str]:
    """Paragraphs (8+ words, one line each) of the standard library's docstrings (modules and their
    public classes and functions, modules in sorted order), without repeats."""
    import inspect
    import sysconfig

    stdlib = sysconfig.get_paths()["stdlib"]
    names = sorted(m.name for m in pkgutil.iter_modules([stdlib]) if not m.name.startswith("_")
                   and m.name not in ("antigravity", "this", "idlelib", "turtledemo", "tkinter", "turtle", "test"))
    seen, out = set(), []
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - modules that need a display, a platform, ...
            continue
        docs = [module.__doc__] + [getattr(obj, "__doc__", None) for key, obj in sorted(vars(module).items())
                                   if not key.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))]
        for doc in docs:
            for para in re.split(r"\n\s*\n", doc or ""):
                text = " ".join(para.split())
                if len(_WORDS.findall(text)) >= 8 and text not in seen:
                    seen.add(text)
                    out.append(text)
                    if len(out) >= limit:
                        return out
    return out


def read_lines(path: str) -> list[str]:
    return [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest per row, best first."""
    idx = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return np.take_along_axis(idx, np.argsort(-np.take_along_axis(scores, idx, 1), axis=1), 1)


def hamming(queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Hamming distances [q, d] of packed bit vectors (uint8)."""
    table = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).sum(1).astype(np.int32)
    return np.stack([table[np.bitwise_xor(q, docs)].sum(1) for q in queries])


def int8_scores(queries: np.ndarray, docs_int8: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """float32 query . the int8 documents mapped back to their levels' lower ends (a linear map of the
    int8 values, the way a vector database scores int8 against a float query)."""
    starts = ranges[0]
    steps = (ranges[1] - starts) / 255
    return queries @ (starts + (docs_int8.astype(np.float32) + 128) * steps).T


def overlap(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / truth.shape[1] for a, b in zip(found, truth)]))


def retrieval(docs: np.ndarray, queries: np.ndarray, calib: np.ndarray, k: int, rescore: int) -> dict[str, float]:
    """top-k overlaps with float32 search for float32 [n, w] normalized documents and queries."""
    truth = top_k(queries @ docs.T, k)
    ranges = calibration_ranges(calib)
    d8 = quantize(docs, "int8", ranges)
    bits_d, bits_q = quantize(docs, "ubinary"), quantize(queries, "ubinary")
    ham = hamming(bits_q, bits_d)
    n_cand = min(rescore * k, docs.shape[0])
    cand = top_k(-ham.astype(np.float32), n_cand)
    positive = (docs > 0).mean(axis=0)
    out = {"int8": overlap(top_k(int8_scores(queries, d8, ranges), k), truth),
           "ubinary": overlap(top_k(-ham.astype(np.float32), k), truth)}
    for name, rescored in (("ubinary -> int8", lambda q, c: int8_scores(q[None], d8[c], ranges)[0]),
                           ("ubinary -> float32", lambda q, c: docs[c] @ q)):
        picked = np.stack([c[np.argsort(-rescored(q, c))[:k]] for q, c in zip(queries, cand)])
        out[name] = overlap(picked, truth)
    # how informative the sign bits are: 0.5 when each dimension is positive in half of the documents,
    # 1.0 when every document has the same bits (a common offset, as in an LM's mean-pooled states)
    out["sign agreement"] = float(np.maximum(positive, 1 - positive).mean())
    return out


def unit_rows(rows: np.ndarray, width: int) -> np.ndarray:
    """The first ``width`` values of ``rows``, L2-normalized (what ``encode(dimensions=width, normalize=True)``
    gives), cut from one full-width encode instead of one encode per width."""
    cut = rows[:, :width]
    return (cut / np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), L2_NORM_EPS)).astype(np.float32)


def encode_cost(embedder: Embedder, texts: list[str], ranges: np.ndarray, reps: int) -> dict[str, float]:
    """Median over repetitions of (encode time in a precision / float32 encode time in the same repetition)."""
    def measure(name, cell):
        start = time.perf_counter()
        embedder.encode(texts, precision=name, ranges=ranges if PRECISIONS[name].needs_ranges else None)
        return time.perf_counter() - start

    times = interleave(list(NAMES), ["cell"], reps, measure, warm_up=lambda c: True)
    floats = times[("float32", "cell")]
    out = {name: statistics.median(t / f for t, f in zip(times[(name, "cell")], floats)) for name in NAMES}
    out["float32 seconds"] = statistics.median(floats)
    rows = embedder.encode(texts)
    for name in NAMES[1:]:  # the quantization step alone, per vector
        start = time.perf_counter()
        for _ in range(20):
            quantize(rows, name, ranges)
        out[f"{name} us/vector"] = (time.perf_counter() - start) / 20 / len(texts) * 1e6
    return out


def model_folder(args) -> tuple[Path, str]:
    if args.export:
        return Path(args.export), str(args.export)
    cache = cache_dir(args.cache_dir)
    if args.shape:
        return cached_export(shape_model(args.shape, cache), "i2s", cache), f"{args.shape} (random weights, i2s)"
    from bitnet_onnx.export.exporter import export

    out = cache / "precision" / (Path(args.gguf).stem + f"-{args.pooling}-f32")
    if not out.is_dir():
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            export(args.gguf, Path(tmp) / "x", weights="f32", pooling=args.pooling)
            (Path(tmp) / "x").rename(out)
    return out, f"{Path(args.gguf).name} (f32 export, {args.pooling} pooling)"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--export", help="an exported folder")
    src.add_argument("--gguf", help="a GGUF file, exported once as f32 into the bench cache")
    src.add_argument("--shape", help="a bench --shape (random weights: geometry only)")
    p.add_argument("--pooling", default="mean", help="pooling for a GGUF without one (default mean)")
    p.add_argument("--corpus", help="documents, one per line (default: stdlib docstring paragraphs)")
    p.add_argument("--queries", help="queries, one per line (default: first sentences of held-out paragraphs)")
    p.add_argument("--docs", type=int, default=2000)
    p.add_argument("--nqueries", type=int, default=200)
    p.add_argument("--dimensions", default="", help="widths, e.g. 640,256 (default: the full width)")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--rescore", type=int, default=4, help="binary candidates per result to rescore (default 4)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cache-dir")
    p.add_argument("--json")
    args = p.parse_args()

    folder, label = model_folder(args)
    embedder = Embedder(folder, threads=args.threads)
    if args.corpus:
        docs = read_lines(args.corpus)[:args.docs]
        queries = read_lines(args.queries)[:args.nqueries] if args.queries else docs[:args.nqueries]
    else:
        paragraphs = stdlib_paragraphs(args.docs + args.nqueries)
        docs, held = paragraphs[:args.docs], paragraphs[args.docs:]
        queries = [re.split(r"(?<=[.?!])\s", t, maxsplit=1)[0] for t in held]
    widths = [int(w) for w in args.dimensions.split(",") if w] or [embedder.dimension]
    print(f"# bench_precision {datetime.date.today()}: {label}; CPU {cpu_name()}, kernels {selected_isa()}, "
          f"{args.threads} thread(s); {len(docs)} documents, {len(queries)} queries, top-{args.k}, "
          f"binary rescoring of {args.rescore}x{args.k}")
    start = time.perf_counter()
    doc_full = embedder.encode(docs, show_progress_bar=False)
    query_full = embedder.encode(queries, show_progress_bar=False)
    print(f"# embedded in {time.perf_counter() - start:.0f} s")
    report = {"model": label, "cpu": cpu_name(), "isa": selected_isa(), "docs": len(docs), "queries": len(queries),
              "k": args.k, "rescore": args.rescore, "widths": {}}
    print(f"| width | bytes/vector f32 / int8 / ubinary | top-{args.k} overlap: int8 | ubinary | "
          f"ubinary -> int8 | ubinary -> float32 | sign agreement |")
    print("|---|---|---|---|---|---|---|")
    for w in widths:
        d = unit_rows(doc_full, w)  # cosine, whatever the export does
        q = unit_rows(query_full, w)
        result = retrieval(d, q, d[: len(d) // 2], args.k, args.rescore)
        sizes = [PRECISIONS[n].bytes_per_vector(w) for n in ("float32", "int8", "ubinary")]
        report["widths"][w] = {"bytes": dict(zip(("float32", "int8", "ubinary"), sizes)), "overlap": result}
        print(f"| {w} | {' / '.join(map(str, sizes))} | " + " | ".join(f"{result[n]:.3f}" for n in result) + " |")
    cost = encode_cost(embedder, docs[:64], calibration_ranges(doc_full[: len(docs) // 2]), args.reps)
    report["encode_cost"] = cost
    print(f"\nencode of 64 documents, float32 {cost['float32 seconds']:.2f} s (median of {args.reps}); "
          "time in each precision / float32, same repetition (medians), and the quantization alone:")
    for name in NAMES[1:]:
        print(f"  {name:8s} {cost[name]:.3f}x   {cost[f'{name} us/vector']:.2f} us/vector")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
