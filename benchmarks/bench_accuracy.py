"""The export-vs-reference cosines docs/export.md quotes, on random-weight BitNet models of the full real shapes.

    python benchmarks/bench_accuracy.py [--arch qwen3,gemma3] [--layers N]

For each architecture: a random-weight BitNet model of the released shape (all layers unless --layers),
exported as i2s and f32 with the defaults; ``compare`` (what ``verify`` runs) on verify's default texts
prints the lowest and highest cosine of each export against its reference (int8 BitLinear for i2s,
float for f32), and how far the int8 reference itself moves when its embedding table is perturbed by
1e-7 relative (the scale of one rounding difference), the yardstick for the i2s figures.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import REAL_SHAPES
from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.compare import compare
from bitnet_onnx.export.exporter import export
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.reference import VERIFY_TEXTS, Reference
from bitnet_onnx.runtime.tokenization import TextTokenizer
from bitnet_onnx.testing import make_model

PERTURBATION = 1e-7


def perturbed_cosine(model: Path, out: Path, texts: list[str]) -> float:
    """Lowest cosine of the int8 reference against itself with the embedding table scaled by (1 + 1e-7 * noise)."""
    import torch

    m = Manifest.read(out)
    reference = Reference(model, pooling=m.pooling)
    ids, mask = TextTokenizer.from_folder(out).encode(texts)
    base, _ = reference.encode(ids, mask)
    table = reference.model.get_input_embeddings().weight
    with torch.no_grad():
        noise = torch.from_numpy(np.random.default_rng(0).standard_normal(tuple(table.shape)).astype(np.float32))
        table.mul_(1 + PERTURBATION * noise)
    moved, _ = reference.encode(ids, mask)
    return float(min(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(base, moved)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default=",".join(REAL_SHAPES))
    p.add_argument("--layers", type=int, help="fewer layers than the released model (default: all)")
    args = p.parse_args()
    texts = list(VERIFY_TEXTS)
    print(f"# {cpu_name()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; random weights, verify's {len(texts)} texts")
    print("| model | layers | export | attention | reference | min cosine | max cosine | reference vs itself, 1e-7 perturbed |")
    print("|---|---|---|---|---|---|---|---|")
    for arch in args.arch.split(","):
        shape = REAL_SHAPES[arch]
        with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as tmp:
            model = make_model(Path(tmp) / "model", arch, shape=shape.name, layers=args.layers)
            layers = args.layers or shape.config["num_hidden_layers"]
            for weights, reference in (("f32", "float"), ("i2s", "int8")):
                out = export(model, Path(tmp) / weights, weights=weights)
                cosines = [row["cosine"] for row in compare(out, model, texts)]
                moved = f"{perturbed_cosine(model, out, texts):.6f}" if weights == "i2s" else "-"
                print(f"| {shape.name} | {layers} | {weights} | {Manifest.read(out).attention} | {reference} | "
                      f"{min(cosines):.6f} | {max(cosines):.6f} | {moved} |", flush=True)


if __name__ == "__main__":
    main()
