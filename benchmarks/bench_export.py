"""Export time and file sizes for random-weight BitNet models of the real Qwen3-0.6B and Gemma3-270M shapes.

Goals (issue 4): export under 60 s; i2s model.onnx at most 430 MB for Qwen3-0.6B.

    python benchmarks/bench_export.py [--shape qwen3-0.6b gemma3-270m] [--weights i2s int8 nbits f16 f32] [--reps 3]

Each (shape, variant) is built ``--reps`` times (interleaved repetitions, the variant order rotating), each in
a fresh process that reports its build time (imports excluded) and peak RSS; the medians are printed. Variants
are the rows of ``bitnet_onnx.bench.variants`` (the exporter's weights, nbits2/nbits4, ort-int8). The model
folder is generated once per shape in a temp dir (bf16 safetensors, like the released models).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bitnet_onnx.bench.cache import model_shapes
from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.bench.report import model_bytes
from bitnet_onnx.bench.timing import interleave
from bitnet_onnx.bench.variants import VARIANTS
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.testing import make_model

CHILD = """
import json, sys, time
from pathlib import Path
import bitnet_onnx.export.exporter  # imported before the clock starts
from bitnet_onnx.bench.host import peak_rss_bytes
from bitnet_onnx.bench.variants import build_variant
t0 = time.perf_counter()
build_variant(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
print(json.dumps({"seconds": time.perf_counter() - t0, "rss_mb": peak_rss_bytes() / 2**20}))
"""


def build_in_child(model: Path, out: Path, variant: str) -> dict:
    """Seconds, peak RSS MB, model.onnx MB and external data MB of one build in a fresh process."""
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run([sys.executable, "-c", CHILD, str(model), str(out), variant],
                          check=True, capture_output=True, text=True)
    graph = (out / Manifest.read(out).model_file).stat().st_size
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "model_mb": graph / 1e6,
            "external_mb": (model_bytes(out) - graph) / 1e6}


def main() -> None:
    shapes = model_shapes()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    real = [name for name, (_, shape) in shapes.items() if shape != "tiny"]
    p.add_argument("--shape", nargs="+", default=real, choices=list(shapes))
    p.add_argument("--weights", nargs="+", default=["i2s", "int8", "nbits", "f16"], choices=list(VARIANTS))
    p.add_argument("--reps", type=int, default=1)
    args = p.parse_args()
    print(f"# {cpu_name()}, {time.strftime('%Y-%m-%d')}, python {platform.python_version()}")
    print(f"{'shape':12} {'weights':8} {'export s':>9} {'peak RSS MB':>12} {'model.onnx MB':>14} {'external MB':>12}")
    with tempfile.TemporaryDirectory(prefix="bench_export_") as tmp:
        tmp = Path(tmp)
        for name in args.shape:
            arch, shape = shapes[name]
            t0 = time.perf_counter()
            model = make_model(tmp / name, arch, bitnet=True, shape=shape)
            made = time.perf_counter() - t0
            source_mb = sum(f.stat().st_size for f in model.iterdir()) / 1e6
            print(f"# {name}: generated the model in {made:.1f} s ({source_mb:.0f} MB)")
            runs = interleave(args.weights, [name], args.reps,
                              lambda weights, _: build_in_child(model, tmp / f"{name}-{weights}", weights))
            for weights in args.weights:
                med = {k: statistics.median(r[k] for r in runs[(weights, name)]) for k in runs[(weights, name)][0]}
                print(f"{name:12} {weights:8} {med['seconds']:9.1f} {med['rss_mb']:12.0f} {med['model_mb']:14.1f} "
                      f"{med['external_mb']:12.1f}")
                shutil.rmtree(tmp / f"{name}-{weights}", ignore_errors=True)
            shutil.rmtree(model, ignore_errors=True)


if __name__ == "__main__":
    main()
