"""``bitnet-onnx demo``: the whole pipeline on small deterministic BitNet models, one per architecture.

For Qwen3 and Gemma3: write a random-weight BitNet model with the real layer widths but few layers
and a small vocabulary (the test-model factory, seed 0), export it (i2s, plus the int8 and f32
baselines for the speed table), embed sample texts with ``Embedder``, print their cosine matrix,
the cosines against the PyTorch reference when torch and transformers are installed, and a short
bench. A few minutes at most on 2 cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import REAL_SHAPES
from bitnet_onnx.errors import BitnetOnnxError

# Each architecture's released-model widths (arch.REAL_SHAPES) cut to its demo_layers, over the factory's
# "tiny" shape otherwise (a 512-token vocabulary, short windows): seconds to build and export.
_WIDTHS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "query_pre_attn_scalar",
           "intermediate_size")
DEMO_SHAPES = {arch: {**{k: real.config[k] for k in _WIDTHS if k in real.config},
                      "num_hidden_layers": real.demo_layers} for arch, real in REAL_SHAPES.items()}
SAMPLES = (
    "What is the capital of France?",
    "Paris is the capital and largest city of France.",
    "How many legs does a spider have?",
    "Spiders have eight legs and most have eight eyes.",
    "Ternary weights take the values minus one, zero and plus one.",
)
BENCH_VARIANTS = ("i2s", "int8", "f32")
BENCH_CONFIGS = ((1, 16), (16, 128))

EPILOG = """\
examples:
  bitnet-onnx demo                       # everything in a temporary folder, removed at the end
  bitnet-onnx demo --workdir demo-out    # keep the models and exports to try 'embed' on them:
  bitnet-onnx embed demo-out/qwen3-i2s "hello world"
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("--workdir", metavar="DIR", help="keep models and exports here (default: a temporary folder)")
    p.add_argument("--threads", type=int, default=1, metavar="N", help="intra-op threads (default 1)")
    p.add_argument("--reps", type=int, default=3, metavar="N", help="bench repetitions (default 3)")
    p.add_argument("--skip-bench", action="store_true", help="no speed table")


def run(args: argparse.Namespace) -> int:
    if args.threads < 1 or args.reps < 1:
        raise BitnetOnnxError("--threads and --reps must be >= 1")
    if args.workdir:
        work = Path(args.workdir)
        if work.exists() and any(work.iterdir()):
            raise BitnetOnnxError(f"--workdir {work}: exists and is not empty")
        work.mkdir(parents=True, exist_ok=True)
        return _demo(work, args)
    work = Path(tempfile.mkdtemp(prefix="bitnet-onnx-demo-"))
    try:
        return _demo(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _demo(work: Path, args: argparse.Namespace) -> int:
    import onnxruntime as ort

    from bitnet_onnx import customops

    start = time.perf_counter()
    print(f"bitnet-onnx demo: onnxruntime {ort.__version__}, op library {customops.library_path()}")
    print("Models: random BitNet weights (seed 0) with the real layer widths, few layers, a 512-token\n"
          "vocabulary. The similarities show the pipeline end to end, not semantic quality.\n")
    folders: dict[str, dict[str, Path]] = {}
    for arch in DEMO_SHAPES:
        folders[arch] = _arch_demo(arch, work, args)
    if not args.skip_bench:
        _bench(folders, args)
    print(f"\ndemo done in {time.perf_counter() - start:.0f} s")
    return 0


def _arch_demo(arch: str, work: Path, args: argparse.Namespace) -> dict[str, Path]:
    from bitnet_onnx.bench.report import model_bytes
    from bitnet_onnx.bench.variants import build_variant
    from bitnet_onnx.runtime.embedder import Embedder
    from bitnet_onnx.testing import make_model

    model_dir = make_model(work / f"{arch}-hf", arch, bitnet=True, seed=0, shape=DEMO_SHAPES[arch])
    variants = BENCH_VARIANTS if not args.skip_bench else ("i2s",)
    t0 = time.perf_counter()
    out = {v: build_variant(model_dir, work / f"{arch}-{v}", v) for v in variants}
    embedder = Embedder(out["i2s"], threads=args.threads)
    m = embedder.manifest
    shape = DEMO_SHAPES[arch]
    print(f"== {arch}: hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, pooling {m.pooling}, "
          f"dimension {m.dimension} ==")
    sizes = ", ".join(f"{v} {model_bytes(f) / 2**20:.1f} MB" for v, f in out.items())
    print(f"exported {', '.join(out)} in {time.perf_counter() - t0:.1f} s ({sizes}) -> {work}")

    vectors = embedder.encode(list(SAMPLES))
    print("cosine similarity of the sample texts (i2s export):")
    print(_matrix(embedder.similarity(vectors, vectors)))
    for k, text in enumerate(SAMPLES, start=1):
        print(f"  [{k}] {text}")
    _verify(out["i2s"], model_dir, args.threads)
    print()
    return out


def _matrix(sim: np.ndarray) -> str:
    n = sim.shape[0]
    head = "      " + "".join(f"{f'[{j + 1}]':>7}" for j in range(n))
    rows = [f"  [{i + 1}]" + "".join(f"{sim[i, j]:7.3f}" for j in range(n)) for i in range(n)]
    return "\n".join([head, *rows])


def _verify(out_dir: Path, model_dir: Path, threads: int) -> None:
    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"verify against PyTorch: skipped ({' and '.join(missing)} not installed; "
              f"pip install 'bitnet-onnx[reference]')")
        return
    from bitnet_onnx.compare import compare

    rows = compare(out_dir, model_dir, list(SAMPLES), threads=threads)
    cosines = [r["cosine"] for r in rows]
    print(f"verify against PyTorch (transformers + BitLinear reference): cosines "
          f"{' '.join(f'{c:.6f}' for c in cosines)}; worst {min(cosines):.6f}")


def _bench(folders: dict[str, dict[str, Path]], args: argparse.Namespace) -> None:
    from bitnet_onnx.bench.measure import measure
    from bitnet_onnx.bench.report import format_table

    for arch, out in folders.items():
        result = measure(out, list(BENCH_CONFIGS), args.threads, args.reps)
        result["model"] = f"{arch} demo ({DEMO_SHAPES[arch]['num_hidden_layers']} layers, real widths)"
        print(format_table(result))
        print()
    print("Full-size models: bitnet-onnx bench --shape qwen3-0.6b --threads 1  (see BENCHMARKS.md)")
