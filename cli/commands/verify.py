"""``bitnet-onnx verify``: compare an exported folder with the PyTorch reference, text by text.

The comparison is ``bitnet_onnx.compare``; this verb prints its rows and exits 1 when any text's
cosine is below ``--threshold``.
"""

from __future__ import annotations

import argparse

from bitnet_onnx.compare import compare
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.reference import VERIFY_TEXTS

EPILOG = """examples:
  bitnet-onnx verify ./qwen3-onnx ./bitnet-qwen3-embedding
  bitnet-onnx verify ./gemma3-onnx ./bitnet-gemma3 --texts "hello world" "a second text" --threshold 0.9999"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("out_dir", metavar="OUT_DIR", help="folder written by 'bitnet-onnx export'")
    p.add_argument("model_dir", metavar="MODEL_DIR", help="the HF model folder or GGUF file it was exported from")
    p.add_argument("--texts", nargs="+", metavar="TEXT", help="texts to compare (default: five built-in samples)")
    p.add_argument("--threshold", type=float, default=0.999, help="minimum cosine per text (default 0.999)")
    p.add_argument("--threads", type=int, default=None, help="ONNX Runtime intra-op threads")


def run(args: argparse.Namespace) -> int:
    texts = list(args.texts or VERIFY_TEXTS)
    if not texts:
        raise BitnetOnnxError("--texts: give at least one text")
    if not 0.0 < args.threshold <= 1.0:
        raise BitnetOnnxError(f"--threshold must be in (0, 1], got {args.threshold}")
    rows = compare(args.out_dir, args.model_dir, texts, threads=args.threads)
    worst = min(r["cosine"] for r in rows)
    print(f"{'cosine':>10} {'max|diff|':>10} {'tokens':>6}  text")
    for r in rows:
        flag = "" if r["cosine"] >= args.threshold else "  <-- below threshold"
        text = r["text"] if len(r["text"]) <= 60 else r["text"][:57] + "..."
        print(f"{r['cosine']:10.6f} {r['max_abs_diff']:10.2e} {r['tokens']:6d}  {text!r}{flag}")
    ok = worst >= args.threshold
    print(f"{'PASS' if ok else 'FAIL'}: worst cosine {worst:.6f} (threshold {args.threshold})")
    return 0 if ok else 1
