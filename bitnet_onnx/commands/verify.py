"""``bitnet-onnx verify``: compare an exported folder with the PyTorch reference, text by text.

The texts go through the exported folder's own tokenizer rules (the runtime's TextTokenizer: EOS
rule, truncation, padding side) as one padded batch; the same ids and mask feed the reference.
The reference matches the export's weights variant: full BitLinear (int8 activations) for i2s,
int8 and nbits; fake-quant (float activations) for f32/f16 exports of BitNet models; plain HF for
standard models. Exit 1 when any text's cosine is below ``--threshold``.
"""

from __future__ import annotations

import argparse

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError

DEFAULT_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "Ternary weights take two bits each; activations are quantized to eight bits per token.",
    "def embed(texts): return model.encode(texts, normalize_embeddings=True)",
    "short",
)

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


def reference_activations(weights: str) -> str:
    """Which BitLinear numerics the export's weights variant implements."""
    return "float" if weights in ("f32", "f16") else "int8"


def compare(out_dir, model_dir, texts, threads: int | None = None) -> list[dict]:
    """Per text: cosine and max abs difference of sentence_embedding, export vs reference."""
    from bitnet_onnx.manifest import Manifest
    from bitnet_onnx.reference import Reference
    from bitnet_onnx.runtime.session import SENTENCE_OUTPUT, create_session
    from bitnet_onnx.runtime.tokenization import TextTokenizer

    manifest = Manifest.read(out_dir)
    reference = Reference(model_dir, activations=reference_activations(manifest.weights),
                          ternarize=manifest.ternarized, pooling=manifest.pooling)
    if reference.folder.arch.name != manifest.arch:
        raise BitnetOnnxError(f"{model_dir}: is {reference.folder.arch.name}, but {out_dir} holds a {manifest.arch} export")
    ids, mask = TextTokenizer.from_folder(out_dir).encode(texts)
    session = create_session(out_dir, manifest, threads=threads)
    got = session.run([SENTENCE_OUTPUT], {"input_ids": ids, "attention_mask": mask})[0]
    want, _ = reference.encode(ids, mask)
    rows = []
    for text, g, w, m in zip(texts, got, want, mask):
        denom = float(np.linalg.norm(g) * np.linalg.norm(w)) or 1.0
        rows.append({"text": text, "tokens": int(m.sum()), "cosine": float(np.dot(g, w) / denom),
                     "max_abs_diff": float(np.max(np.abs(g - w)))})
    return rows


def run(args: argparse.Namespace) -> int:
    texts = list(args.texts or DEFAULT_TEXTS)
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
