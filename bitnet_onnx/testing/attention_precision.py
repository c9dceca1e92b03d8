"""The accuracy gate of EncoderAttention's bf16 precision (docs/attention.md, "Precision"): a real,
trained model exported twice with ``--weights f32 --attention fused`` (float32 weights, so the only
difference is the attention's rounding), ``--attention-precision f32`` and ``bf16``, and the cosine of
their sentence embeddings on real text at given token counts, each text alone and in a padded batch.
Used by tests/test_attention_precision_gemma3.py (512 tokens) and
benchmarks/accuracy_attention_bf16.py (512 and 2048 tokens, the recorded numbers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bitnet_onnx.testing.corpus import CORPUS


def export_pair(model: Path, root: Path) -> dict[str, Path]:
    """{precision: export folder} of ``model`` with f32 weights and the fused attention op."""
    from bitnet_onnx.export.exporter import export

    return {p: export(model, root / p, weights="f32", attention_name="fused", pooling="mean",
                      attention_precision=p) for p in ("f32", "bf16")}


def long_ids(embedder, tokens: int) -> list[int]:
    """``tokens`` token ids of real English text (the corpus repeated, as one document)."""
    text = " ".join(line for line in CORPUS.splitlines() if line)
    ids: list[int] = []
    while len(ids) < tokens:
        text = text + " " + text
        ids = embedder.tokenize([text], truncate=False)[0]
    return ids[:tokens]


def cosines(folders: dict[str, Path], tokens: int) -> dict[str, float]:
    """min cosine between the f32 and bf16 exports' sentence embeddings: "alone" (one text of ``tokens``
    tokens, batch 1) and "padded" (that text, one of 3/5 and one of 1/8 of its length, one batch padded
    to the longest; every row compared)."""
    from bitnet_onnx.runtime.embedder import Embedder

    runs = {p: Embedder(f, threads=1) for p, f in folders.items()}
    ids = long_ids(runs["f32"], tokens)
    batch = [ids, ids[: tokens * 3 // 5], ids[: max(8, tokens // 8)]]
    out = {}
    for kind, rows in (("alone", [ids]), ("padded", batch)):
        a, b = (runs[p].run_batch(rows).astype(np.float64) for p in ("f32", "bf16"))
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        out[kind] = float(cos.min())
    return out
