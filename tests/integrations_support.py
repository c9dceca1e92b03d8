"""Shared by tests/test_integrations_*.py and the HF layout's tests: exports with the HF layout, texts of
mixed lengths, the cosine check against ``Embedder.encode``, the data files a graph names. No network: HF_HUB_OFFLINE is set on import."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

os.environ["HF_HUB_OFFLINE"] = "1"  # every loader reads the local folder; nothing may reach a hub

from bitnet_onnx.arch import ARCHITECTURES  # noqa: E402

ARCHS = sorted(ARCHITECTURES)
# ONNX Runtime's own op domains: all that a host without our op library (Java, C#, JS, mobile builds) has
ORT_DOMAINS = {"", "ai.onnx", "com.microsoft"}
MIN_COSINE = 0.99999
# past the tiny models' 256 tokens: every library cuts the text and keeps the special tokens (Gemma3's
# trailing <eos>, Qwen3's EOS), as transformers does (bitnet_onnx/special_tokens.py)
LONG_TEXT = "Ternary weights make matrix products cheap: additions and subtractions, no multiplications. " * 40
TEXTS = [
    "a",
    "What is the capital of France? Paris is the capital and largest city of France.",
    "Ternary weights",
    "The quick brown fox jumps over the lazy dog. " * 5,
    "Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ?",
    LONG_TEXT,
]
# The real-size loads (real widths, 150k-262k vocabularies) take every text but LONG_TEXT: it is there to be
# cut at the tiny models' 256 tokens, which an export of max_length 32768 never does, and padding a batch
# to its ~640 tokens was most of a real-size load's time. The batch is still padded: one word to five
# sentences.
REAL_SIZE_TEXTS = [t for t in TEXTS if t is not LONG_TEXT]


def export_with_layout(root: Path, model_dir: Path, weights: str) -> Path:
    """``bitnet-onnx export`` of ``model_dir``, then the HF layout added to it (write_hf_layout)."""
    from bitnet_onnx.cli import main
    from bitnet_onnx.export.hf_layout import write_hf_layout

    out = Path(root) / f"{Path(model_dir).name}-{weights}"
    if not out.exists():
        assert main(["export", str(model_dir), "-o", str(out), "--weights", weights]) == 0
        write_hf_layout(out, model_dir)
    return out


class LayoutExports:
    """export(arch, weights, **make_model_options) -> an export folder with the HF layout, made once."""

    def __init__(self, tiny_model, root: Path):
        self.tiny_model, self.root, self.done = tiny_model, Path(root), {}

    def __call__(self, arch: str, weights: str, **options) -> Path:
        key = (arch, weights, tuple(sorted(options.items())))
        if key not in self.done:
            model = self.tiny_model(arch, **options)
            self.done[key] = export_with_layout(self.root / str(len(self.done)), model, weights)
        return self.done[key]


def assert_same_vectors(got, want) -> None:
    """Row by row cosine >= MIN_COSINE, same shape."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    cos = (got * want).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1))
    assert np.all(cos >= MIN_COSINE), cos


def external_locations(path) -> set[str]:
    """The external data files the tensors of graph ``path`` name (relative to its folder)."""
    model = onnx.load(str(path), load_external_data=False)
    return {e.value for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL
            for e in t.external_data if e.key == "location"}


def plain_ort_session(path) -> ort.InferenceSession:
    """A session of graph ``path`` as a host without our op library makes it: every node and opset import in
    ORT_DOMAINS, no local functions, and no session options at all."""
    model = onnx.load(str(path), load_external_data=False)
    domains = {n.domain for n in model.graph.node} | {o.domain for o in model.opset_import}
    assert domains <= ORT_DOMAINS and not model.functions, (path, domains, [f.name for f in model.functions])
    return ort.InferenceSession(str(path))
