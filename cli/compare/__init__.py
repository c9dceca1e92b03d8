"""An exported folder against the PyTorch reference, text by text (``bitnet-onnx verify``, the demo).

The texts go through the exported folder's ``Embedder`` (its tokenizer rules: EOS rule, truncation, padding
side; no prompt) as one padded batch of the graph's sentence embeddings; the same ids and mask feed the
reference. The reference matches the export's weight format (its record's ``reference_activations``): full
BitLinear (int8 activations) for i2s, int8 and nbits; fake-quant (float activations) for f32/f16
exports of BitNet models; plain HF for standard models.

A library of the command layer: it joins a target (the runtime's Embedder) with the reference, which no
target may do (pyproject.toml's import contract "targets-without-reference").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import weight_format
from bitnet_onnx.reference import Reference
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.weights import open_source


def compare(out_dir: str | Path, model_dir: str | Path, texts: list[str], threads: int | None = None) -> list[dict]:
    """Per text: cosine and max abs difference of sentence_embedding, export vs reference."""
    embedder = Embedder(out_dir, threads=threads)
    manifest = embedder.manifest
    source = open_source(model_dir)  # the arch check before the reference's, which would speak first
    if source.arch.name != manifest.arch:
        raise BitnetOnnxError(f"{model_dir}: is {source.arch.name}, but {out_dir} holds a {manifest.arch} export")
    reference = Reference(source, activations=weight_format(manifest.weights).reference_activations,
                          ternarize=manifest.ternarized, pooling=manifest.pooling)
    prepared = embedder.prepare(texts, prompt="")  # the texts as given: no prompt in front
    ids, mask = prepared.padded()
    # the graph's sentence embeddings as they are (full width, the manifest's normalization), one padded batch
    got = embedder.embed(prepared, batch_size=len(texts), max_batch_tokens=ids.size or 1)
    want, _ = reference.encode(ids, mask)
    return [embedding_row(text, g, w, int(m.sum())) for text, g, w, m in zip(texts, got, want, mask)]


def embedding_row(text: str, got: np.ndarray, want: np.ndarray, tokens: int) -> dict:
    """One text's comparison: cosine and max |difference| of two sentence embeddings."""
    denom = float(np.linalg.norm(got) * np.linalg.norm(want)) or 1.0
    return {"text": text, "tokens": tokens, "cosine": float(np.dot(got, want) / denom),
            "max_abs_diff": float(np.max(np.abs(got - want)))}


# -- two exports of one model that differ only in the attention's precision --------------------------
# The accuracy gate of EncoderAttention's bf16 precision (docs/attention.md, "Precision"): a real, trained
# model exported with --weights f32 --attention fused (float32 weights, so the only difference is the
# attention's rounding) at both precisions; tests/test_attention_precision_gemma3.py runs it at 512 tokens,
# benchmarks/accuracy_attention_bf16.py at 512 and 2048 (the recorded numbers).
ATTENTION_PRECISIONS = ("f32", "bf16")


def attention_precision_export(model: str | Path, out: Path, precision: str) -> Path:
    """``model`` exported to ``out`` with f32 weights and the fused attention op at ``precision``."""
    from bitnet_onnx.export.exporter import export

    return export(model, out, weights="f32", attention_name="fused", pooling="mean", attention_precision=precision)


def attention_precision_exports(model: str | Path, root: Path) -> dict[str, Path]:
    """{precision: attention_precision_export of ``model`` into root/<precision>}."""
    return {p: attention_precision_export(model, root / p, p) for p in ATTENTION_PRECISIONS}


def _document_ids(embedder, tokens: int) -> list[int]:
    """``tokens`` token ids of real English text (the corpus repeated, as one document)."""
    from bitnet_onnx.testing.corpus import CORPUS

    text = " ".join(line for line in CORPUS.splitlines() if line)
    ids: list[int] = []
    while len(ids) < tokens:
        text = text + " " + text
        ids = embedder.tokenize([text], truncate=False)[0]
    return ids[:tokens]


def attention_precision_cosines(folders: dict[str, Path], tokens: int) -> dict[str, float]:
    """min cosine between the f32 and bf16 exports' sentence embeddings: "alone" (one text of ``tokens``
    tokens, batch 1) and "padded" (that text, one of 3/5 and one of 1/8 of its length, in one batch padded
    to the longest; every row compared)."""
    runs = {p: Embedder(f, threads=1) for p, f in folders.items()}
    ids = _document_ids(runs["f32"], tokens)
    batch = [ids, ids[: tokens * 3 // 5], ids[: max(8, tokens // 8)]]
    out = {}
    for kind, rows in (("alone", [ids]), ("padded", batch)):
        one_batch = {"batch_size": len(rows), "max_batch_tokens": len(rows) * tokens}
        a, b = (runs[p].embed(runs[p].prepare(ids=rows, normalize=False), **one_batch).astype(np.float64)
                for p in ATTENTION_PRECISIONS)
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        out[kind] = float(cos.min())
    return out
