"""The attention-strategy recipe (docs/contributing.md) kept true: every strategy of
export/attention.py's STRATEGIES exports for every architecture, gives the stock strategy's
embeddings, and has its place in docs/attention.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.export import attention
from bitnet_onnx.formats import FORMATS
from bitnet_onnx.runtime.embedder import Embedder

DOCS = Path(__file__).resolve().parents[1] / "docs" / "attention.md"
TEXTS = ["a cat sat on the mat", "the quick brown fox jumps over the lazy dog again and again", "x"]


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("strategy", attention.STRATEGIES)
def test_every_strategy_gives_the_stock_embeddings(tiny_model, tiny_export, arch, strategy):
    folder = tiny_model(arch)
    stock = Embedder(tiny_export(folder, "i2s", attention_name="onnx")).encode(TEXTS)
    got = Embedder(tiny_export(folder, "i2s", attention_name=strategy)).encode(TEXTS)
    cos = (stock * got).sum(-1) / (np.linalg.norm(stock, axis=-1) * np.linalg.norm(got, axis=-1))
    assert cos.min() >= 0.9999, (strategy, cos)


def test_every_strategy_is_documented_and_every_default_is_a_strategy():
    text = DOCS.read_text(encoding="utf-8")
    for name in attention.STRATEGIES:
        assert f"`{name}`" in text, f"docs/attention.md does not name the {name!r} strategy"
    for fmt in FORMATS.values():
        assert fmt.default_attention in attention.STRATEGIES, f"{fmt.name}: default_attention {fmt.default_attention!r}"
