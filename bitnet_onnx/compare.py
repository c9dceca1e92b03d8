"""An exported folder against the PyTorch reference, text by text (``bitnet-onnx verify``, the demo).

The texts go through the exported folder's own tokenizer rules (the runtime's TextTokenizer: EOS
rule, truncation, padding side) as one padded batch; the same ids and mask feed the reference.
The reference matches the export's weight format (its record's ``reference_activations``): full
BitLinear (int8 activations) for i2s, int8 and nbits; fake-quant (float activations) for f32/f16
exports of BitNet models; plain HF for standard models.

A library of the command layer: it joins a target (the runtime's session and tokenizer) with the
reference, which no target may do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import weight_format
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.reference import Reference
from bitnet_onnx.runtime.session import SENTENCE_OUTPUT, create_session
from bitnet_onnx.runtime.tokenization import TextTokenizer
from bitnet_onnx.weights import open_source


def compare(out_dir: str | Path, model_dir: str | Path, texts: list[str], threads: int | None = None) -> list[dict]:
    """Per text: cosine and max abs difference of sentence_embedding, export vs reference."""
    manifest = Manifest.read(out_dir)
    source = open_source(model_dir)  # the arch check before the reference's, which would speak first
    if source.arch.name != manifest.arch:
        raise BitnetOnnxError(f"{model_dir}: is {source.arch.name}, but {out_dir} holds a {manifest.arch} export")
    reference = Reference(source, activations=weight_format(manifest.weights).reference_activations,
                          ternarize=manifest.ternarized, pooling=manifest.pooling)
    ids, mask = TextTokenizer.from_folder(out_dir).encode(texts)
    session = create_session(out_dir, manifest, threads=threads)
    got = session.run([SENTENCE_OUTPUT], {"input_ids": ids, "attention_mask": mask})[0]
    want, _ = reference.encode(ids, mask)
    return [embedding_row(text, g, w, int(m.sum())) for text, g, w, m in zip(texts, got, want, mask)]


def embedding_row(text: str, got: np.ndarray, want: np.ndarray, tokens: int) -> dict:
    """One text's comparison: cosine and max |difference| of two sentence embeddings."""
    denom = float(np.linalg.norm(got) * np.linalg.norm(want)) or 1.0
    return {"text": text, "tokens": tokens, "cosine": float(np.dot(got, want) / denom),
            "max_abs_diff": float(np.max(np.abs(got - want)))}
