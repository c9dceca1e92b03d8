"""Numeric claims of README.md and docs/export.md, checked where they are stated to hold.

"int8 gives the same numbers as i2s": on random-weight models of the real width and vocabulary, an
int8 export equals the i2s export bit for bit when both use the same attention (EncoderAttention, the i2s
default; the stock decomposition; ONNX Runtime's own kernels, the int8 default at a 32k max_length); the
tiny-model form (each default attention, within 1e-4) is tests/test_export.py::test_int8_equals_i2s. The models
are conftest's real_width_model, shared with the other modules at these layer counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.export.exporter import export
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.testing.factory import CORPUS

pytestmark = pytest.mark.real_size  # the suite's tiers: tests/suite_marks.py

TEXTS = [line for line in CORPUS.splitlines() if line][:6]
FEW_LAYERS = {"qwen3": {"layers": 1}, "gemma3": {"layers": 2, "sliding_window_pattern": 2}}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_int8_equals_i2s_with_the_same_attention_at_real_shapes(tmp_path, real_width_model, arch):
    model = real_width_model(arch, **FEW_LAYERS[arch])
    for attention in ("fused", "onnx", "ort"):
        i2s, int8 = (export(model, tmp_path / f"{w}-{attention}", weights=w, attention_name=attention)
                     for w in ("i2s", "int8"))
        assert Manifest.read(i2s).attention == Manifest.read(int8).attention == attention
        assert Manifest.read(int8).needs_custom_ops == (attention == "fused")  # else plain ORT
        np.testing.assert_array_equal(Embedder(int8).encode(TEXTS), Embedder(i2s).encode(TEXTS))
