"""Export time and file sizes for random-weight BitNet models of the real Qwen3-0.6B and Gemma3-270M shapes.

Goals (issue 4): export under 60 s; i2s model.onnx at most 430 MB for Qwen3-0.6B.

    /work/venv-warm/bin/python benchmarks/bench_export.py [--arch qwen3 gemma3] [--weights i2s int8 nbits f16 f32]

Each (arch, weights) export runs ``--reps`` times (interleaved across variants), each in a fresh process
that reports its export time (imports excluded) and peak RSS; the medians are printed. The model folder is
generated once per arch in a temp dir (bf16 safetensors, like the released models).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bitnet_onnx.commands.bench import cpu_name
from bitnet_onnx.testing.factory import make_model

SHAPES = {"qwen3": "qwen3-0.6b", "gemma3": "gemma3-270m"}


def folder_bytes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir() if p.is_file()}


CHILD = """
import json, resource, sys, time
from bitnet_onnx.export.exporter import export
t0 = time.perf_counter()
export(sys.argv[1], sys.argv[2], weights=sys.argv[3], overwrite=True)
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def export_in_child(model: Path, out: Path, weights: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, str(model), str(out), weights],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--weights", nargs="+", default=["i2s", "int8", "nbits", "f16"],
                   choices=["i2s", "int8", "nbits", "f16", "f32"])
    p.add_argument("--reps", type=int, default=1)
    args = p.parse_args()
    print(f"# {cpu_name()}, {time.strftime('%Y-%m-%d')}, python {platform.python_version()}")
    print(f"{'arch':8} {'weights':8} {'export s':>9} {'peak RSS MB':>12} {'model.onnx MB':>14} {'external MB':>12}")
    with tempfile.TemporaryDirectory(prefix="bench_export_") as tmp:
        tmp = Path(tmp)
        for arch in args.arch:
            t0 = time.perf_counter()
            model = make_model(tmp / arch, arch, bitnet=True, shape=SHAPES[arch])
            made = time.perf_counter() - t0
            source_mb = sum(folder_bytes(model).values()) / 1e6
            print(f"# {arch}: generated {SHAPES[arch]} model in {made:.1f} s ({source_mb:.0f} MB)")
            times: dict[str, list[float]] = {w: [] for w in args.weights}
            rss: dict[str, list[float]] = {w: [] for w in args.weights}
            sizes: dict[str, dict[str, int]] = {}
            for _ in range(args.reps):
                for weights in args.weights:  # interleaved repetitions
                    out = tmp / f"{arch}-{weights}"
                    result = export_in_child(model, out, weights)
                    times[weights].append(result["seconds"])
                    rss[weights].append(result["rss_mb"])
                    sizes[weights] = folder_bytes(out)
            for weights in args.weights:
                files = sizes[weights]
                ext = sum(v for k, v in files.items() if k.startswith("model.onnx.")) / 1e6
                print(f"{arch:8} {weights:8} {statistics.median(times[weights]):9.1f} "
                      f"{statistics.median(rss[weights]):12.0f} {files['model.onnx'] / 1e6:14.1f} {ext:12.1f}")
            for weights in args.weights:
                shutil.rmtree(tmp / f"{arch}-{weights}", ignore_errors=True)
            shutil.rmtree(model, ignore_errors=True)


if __name__ == "__main__":
    main()
