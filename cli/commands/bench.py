"""``bitnet-onnx bench``: the i2s export against ORT baselines on this machine (bitnet_onnx.bench does the work)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bitnet_onnx.bench.cache import cache_dir, cached_export, model_shapes, shape_model
from bitnet_onnx.bench.measure import measure, profile
from bitnet_onnx.bench.report import format_profile_table, format_table, progress, write_json
from bitnet_onnx.bench.runners import unavailable
from bitnet_onnx.bench.variants import DEFAULT_VARIANTS, parse_variants, variants_help
from bitnet_onnx.errors import BitnetOnnxError

# batch x seq: one-query latency, passages, a batch of passages, documents (where attention is the cost)
DEFAULT_CELLS = "1x16,1x128,1x512,16x128,1x2048,1x8192"
GRID_DEFAULTS = {"--seq": "16,128,512", "--batch": "1,16"}  # --seq / --batch: the one not given

EPILOG = """\
examples:
  bitnet-onnx bench --shape gemma3-270m --threads 1          # random-weight model of the real shape
  bitnet-onnx bench path/to/hf-model --seq 16,128 --batch 1,16 --variants i2s,int8,f32 --json bench.json
  bitnet-onnx bench --shape qwen3-0.6b --cells 1x2048,1x8192 --variants i2s,ort-int8,f32 --profile

Columns: ms per batch and tokens/s are medians over --reps interleaved repetitions; "x f32" and
"x int8", "x ort-int8" are tokens/s ratios from the same run; RSS is the peak resident memory of the worker
process that ran the variant (Python + onnxruntime + the session): "load" once the session is
created, "peak" after all runs (adds the largest batch's activations); file is the size of the
exported model (model.onnx and its external data). The line under the title names each export's
attention core (export --attention).
openvino: OpenVINO's CPU runtime on the f32 export (with the stock attention), at the inference precision
OpenVINO picks for this CPU (bf16 where it has AMX), named in its rows; pip install 'bitnet-onnx[openvino]'.
A default variant this install cannot run is named as unavailable, with why; one asked for with
--variants is an error.
Memory: a run whose activations (the export's cost model, an upper bound) would not fit the memory
budget is not run; its row says what it would need (the stock attention holds [batch, heads, S, S]
scores: gigabytes at 8192 tokens). Every worker keeps its largest run's memory, so the workers'
largest runs must fit together.

--profile: after the timed runs, every cell runs --reps more times per variant in sessions of their
own with ONNX Runtime's profiler on (SessionOptions.enable_profiling; it slows every kernel call, so
these runs are never timed), and a second table gives each cell's shares: "projections" =
I2STernaryMatMul, MatMulNBits, MatMulIntegerToFloat, MatMulInteger, DynamicQuantizeMatMul,
DynamicQuantizeLinear and MatMul/Gemm by a weight; "attention" = EncoderAttention (or another fused
attention op), and for the stock decomposition (attention onnx) its activation-by-activation MatMuls
and Softmax; "other" = every other op (norms, rotary, reshapes; the int8 variant's per-token
quantization, stock elementwise ops); each % of node time, the sum of the kernel calls, so the three
sum to 100, as do the op types after them (the largest by name, the rest as "N others"; --json has
all). "overhead" = the % of each run's time outside any kernel (executor, input/output copies).
Medians over the profiled runs. ORT's trace files are written to a temporary folder and deleted.
llama.cpp variants are not profiled.
Exports are cached under --cache-dir (default: $XDG_CACHE_HOME/bitnet-onnx or ~/.cache/bitnet-onnx).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("model_dir", metavar="MODEL_DIR", nargs="?", help="HF model folder (or use --shape)")
    p.add_argument("--shape", choices=list(model_shapes()), help="bench a random-weight BitNet model of this real shape")
    p.add_argument("--cells", metavar="LIST", help=f"BATCHxSEQ cells to time (default {DEFAULT_CELLS})")
    p.add_argument("--seq", metavar="LIST", help="tokens per text: every --batch with every --seq instead of "
                                                 f"--cells (default {GRID_DEFAULTS['--seq']})")
    p.add_argument("--batch", metavar="LIST", help=f"texts per batch, with --seq (default {GRID_DEFAULTS['--batch']})")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="intra-op threads per session (default 1)")
    p.add_argument("--variants", metavar="LIST", help=variants_help())
    p.add_argument("--memory-budget", type=float, metavar="GIB",
                   help="GiB the runs' activations may take, all workers together (default: 80%% of the memory "
                        "available once the workers are loaded)")
    p.add_argument("--reps", type=int, default=3, metavar="N", help="timed repetitions per cell (default 3)")
    p.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    p.add_argument("--profile", action="store_true",
                   help="also profile every cell (ORT's profiler, separate untimed runs): "
                        "shares of time per op type")
    p.add_argument("--cache-dir", metavar="DIR", help="where exports (and --shape models) are kept")
    p.add_argument("--no-cache", action="store_true", help="re-export even when a cached export exists")


def run(args: argparse.Namespace) -> int:
    configs = _cells(args)
    variants = parse_variants(args.variants) if args.variants is not None else list(DEFAULT_VARIANTS)
    if args.threads < 1:
        raise BitnetOnnxError(f"--threads must be >= 1, got {args.threads}")
    if args.reps < 1:
        raise BitnetOnnxError(f"--reps must be >= 1, got {args.reps}")
    if args.memory_budget is not None and not args.memory_budget > 0:
        raise BitnetOnnxError(f"--memory-budget must be > 0 GiB, got {args.memory_budget}")
    missing = {v: why for v in variants if (why := unavailable(v))}
    if missing and args.variants is not None:  # asked for by name: no table without it
        name, why = next(iter(missing.items()))
        raise BitnetOnnxError(f"--variants {name}: {why}")
    for name, why in missing.items():
        progress(f"bench: {name} unavailable ({why}); going on without it")
    variants = [v for v in variants if v not in missing]
    budget = None if args.memory_budget is None else int(args.memory_budget * 2**30)
    if bool(args.model_dir) == bool(args.shape):
        raise BitnetOnnxError("give either MODEL_DIR or --shape")
    if args.json and not Path(args.json).resolve().parent.is_dir():  # fail before the long part
        raise BitnetOnnxError(f"--json {args.json}: folder {Path(args.json).parent} does not exist")
    cache = cache_dir(args.cache_dir)
    if args.shape:
        model_dir, label = shape_model(args.shape, cache), f"{args.shape} (random BitNet weights, seed 0)"
    else:
        model_dir, label = Path(args.model_dir), str(args.model_dir)
        if not model_dir.is_dir():
            raise BitnetOnnxError(f"{model_dir}: not a folder")
    folders = {v: cached_export(model_dir, v, cache, refresh=args.no_cache) for v in variants}
    result = {**measure(folders, configs, args.threads, args.reps, log=progress, memory_budget=budget),
              "model": label, "unavailable": missing}
    if args.profile:  # after the timed runs, never during: the profiler slows the kernels
        result["profile"] = profile(folders, configs, args.threads, args.reps, log=progress, memory_budget=budget)
    print(format_table(result))
    if args.profile:
        print()
        print(format_profile_table(result))
    if args.json:
        write_json(Path(args.json), result)
    return 0


def _cells(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(batch, seq) cells: --cells, or every --batch with every --seq when either is given."""
    if args.seq is None and args.batch is None:
        return _cell_list(args.cells or DEFAULT_CELLS)
    if args.cells is not None:
        raise BitnetOnnxError("--cells: give either --cells or --seq/--batch")
    seqs = _int_list(args.seq or GRID_DEFAULTS["--seq"], "--seq")
    return [(b, s) for b in _int_list(args.batch or GRID_DEFAULTS["--batch"], "--batch") for s in seqs]


def _cell_list(text: str) -> list[tuple[int, int]]:
    """"1x16,16x128" -> [(1, 16), (16, 128)], without repeats."""
    try:
        cells = [tuple(int(n) for n in item.lower().split("x")) for item in text.split(",") if item.strip()]
    except ValueError:
        cells = []
    if not cells or any(len(c) != 2 or min(c) < 1 for c in cells):
        raise BitnetOnnxError(f"--cells {text!r}: expected comma-separated BATCHxSEQ of positive integers, "
                              "e.g. 1x128,16x128")
    return list(dict.fromkeys(cells))


def _int_list(text: str, name: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BitnetOnnxError(f"{name} {text!r}: expected comma-separated integers, e.g. 16,128") from None
    if not values or min(values) < 1:
        raise BitnetOnnxError(f"{name} {text!r}: expected positive integers")
    return values
