"""Numeric claims of README.md and docs/export.md, checked where they are stated to hold.

"int8 gives the same numbers as i2s": on random-weight models of the real width and vocabulary, an
int8 export equals the i2s export bit for bit when both use the same attention (EncoderAttention, the i2s
default; the stock decomposition; ONNX Runtime's own kernels, the int8 default at a 32k max_length); the
tiny-model form (each default attention, within 1e-4) is tests/test_export.py::test_int8_equals_i2s. The models
are conftest's real_width_model, shared with the other modules at these layer counts.

"about 10,300 tokens for Gemma3-270M" (README.md) and "Qwen3-0.6B up to ~6250 tokens, Gemma3-270M ~10300"
(docs/attention.md): the max_length the stock attention serves in 8 GiB at the released shapes
(arch.REAL_SHAPES), as export/memory.py computes it and its warning prints it (configs only, no model).

bf16 attention "cosine >= 0.99999 to f32 on the real Gemma3-270M" (README.md) is the gate of
tests/test_attention_precision_gemma3.py, which asserts that bound.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest

from bitnet_onnx.arch import ARCHITECTURES, REAL_SHAPES, ModelConfig
from bitnet_onnx.export.exporter import export
from bitnet_onnx.export.memory import choose_attention, longest_served
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.testing import factory
from bitnet_onnx.testing.factory import CORPUS

DOCS = Path(__file__).resolve().parent.parent

TEXTS = [line for line in CORPUS.splitlines() if line][:6]
FEW_LAYERS = {"qwen3": {"layers": 1}, "gemma3": {"layers": 2, "sliding_window_pattern": 2}}


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.real_size  # the suite's tiers: tests/suite_marks.py
def test_int8_equals_i2s_with_the_same_attention_at_real_shapes(tmp_path, real_width_model, arch):
    model = real_width_model(arch, **FEW_LAYERS[arch])
    for attention in ("fused", "onnx", "ort"):
        i2s, int8 = (export(model, tmp_path / f"{w}-{attention}", weights=w, attention_name=attention)
                     for w in ("i2s", "int8"))
        assert Manifest.read(i2s).attention == Manifest.read(int8).attention == attention
        assert Manifest.read(int8).needs_custom_ops == (attention == "fused")  # else plain ORT
        np.testing.assert_array_equal(Embedder(int8).encode(TEXTS), Embedder(i2s).encode(TEXTS))


def _released_config(arch: str, bidirectional: bool = False) -> ModelConfig:
    """The ModelConfig of arch.REAL_SHAPES[arch] (all its layers), as the factory writes its config.json."""
    return factory.model_config(arch, REAL_SHAPES[arch].config, bidirectional=bidirectional)


def _lowered_max_length(caplog, requested: str | None, cfg: ModelConfig) -> int:
    """The max_length choose_attention gives a 32768-token export of ``cfg`` with the stock attention, checked
    to be longest_served's and the number its warning prints."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bitnet_onnx"):
        strategy, served = choose_attention(requested, "f32", cfg, 32768)
    assert strategy == "onnx" and served == longest_served(cfg, "onnx") < 32768
    assert f"max_length lowered from 32768 to {served}," in caplog.text, caplog.text
    return served


def test_readme_tokens_the_stock_attention_serves_a_bidirectional_gemma3_270m(caplog):
    """README: a bidirectional sliding window keeps the stock attention "with the max_length it serves (about
    10,300 tokens for Gemma3-270M)": the default (no --attention) of an f32 export of the released shape."""
    assert "(about 10,300 tokens for Gemma3-270M)" in (DOCS / "README.md").read_text()
    served = _lowered_max_length(caplog, None, _released_config("gemma3", bidirectional=True))
    assert round(served, -2) == 10300, served
    assert "ONNX Runtime's own attention kernels cannot compute this model" in caplog.text


@pytest.mark.parametrize("arch, model, stated", [("qwen3", "Qwen3-0.6B", 6250), ("gemma3", "Gemma3-270M", 10300)])
def test_attention_doc_tokens_the_stock_attention_serves(caplog, arch, model, stated):
    """docs/attention.md: the stock attention serves one text "Qwen3-0.6B up to ~6250 tokens, Gemma3-270M
    ~10300" in 8 GiB; each to the precision it is stated with (the printed 6252 and 10325)."""
    text = re.sub(r"\s+", " ", (DOCS / "docs" / "attention.md").read_text())
    assert re.search(rf"{re.escape(model)}( up to)? ~{stated}\b", text), \
        f"docs/attention.md no longer says {model} ~{stated}"
    served = _lowered_max_length(caplog, "onnx", _released_config(arch))
    stated_digits = len(str(stated).rstrip("0"))  # 6250: three significant digits, 10300: three
    assert round(served, stated_digits - len(str(served))) == stated, served
