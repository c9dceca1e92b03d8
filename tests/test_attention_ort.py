"""``--attention ort`` (ONNX Runtime's own GroupQueryAttention / MultiHeadAttention, export/attention.py)
against ``--attention onnx`` (the stock decomposition) on f32 exports of tiny generated models: causal
(Qwen3, Gemma3's causal sliding window) and bidirectional layers, both padding sides, a 1-token text;
the choice export/memory.py makes for a library-free default at a 32768-token max_length."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.export.builder import MS_DOMAIN
from bitnet_onnx.export.memory import choose_attention, longest_served
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.weights import open_source
from test_attention_export import batch  # padded id batches, either side: the same as the stock attention's tests

LONG = 32768


def run(folder, ids, mask):
    """A plain session: no options, no op library."""
    sess = ort.InferenceSession(str(folder / "model.onnx"))
    return sess.run(["sentence_embedding", "token_embeddings"], {"input_ids": ids, "attention_mask": mask})


def domains(folder) -> set[str]:
    return {n.domain or "ai.onnx" for n in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node}


MODELS = {  # name -> (tiny_model options, the kernel of its layers)
    "qwen3": (dict(arch="qwen3"), "GroupQueryAttention"),
    "gemma3": (dict(arch="gemma3"), "GroupQueryAttention"),  # window 8: sliding, sliding, full
    "qwen3-bidirectional": (dict(arch="qwen3", bidirectional=True), "MultiHeadAttention"),
    "gemma3-bidirectional-full": (dict(arch="gemma3", bidirectional=True, sliding_window_pattern=1),
                                  "MultiHeadAttention"),
}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("side", ["left", "right"])
def test_ort_equals_onnx(tiny_model, tiny_export, model, side):
    options, kernel = MODELS[model]
    folder = tiny_model(bitnet=False, **options)
    got = tiny_export(folder, "f32", attention_name="ort")
    stock = tiny_export(folder, "f32", attention_name="onnx")
    m = Manifest.read(got)
    assert (m.attention, m.needs_custom_ops, m.min_onnxruntime) == ("ort", False, "1.32")
    assert domains(got) <= {"ai.onnx", MS_DOMAIN}
    ops = {n.op_type for n in onnx.load(str(got / "model.onnx"), load_external_data=False).graph.node}
    assert kernel in ops and "Softmax" not in ops

    ids, mask = batch([100, 71, 9, 1], 100, side)  # longer than the window, a 1-token text
    sent, tokens = run(got, ids, mask)
    stock_sent, stock_tokens = run(stock, ids, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(tokens[real], stock_tokens[real], rtol=1e-4, atol=1e-4)
    assert np.isfinite(tokens).all()  # padded rows too: mean pooling multiplies them by 0
    cos = (sent * stock_sent).sum(-1) / (np.linalg.norm(sent, axis=-1) * np.linalg.norm(stock_sent, axis=-1))
    assert cos.min() >= 0.99999


def test_ort_refuses_a_bidirectional_window(tiny_model):
    with pytest.raises(BitnetOnnxError, match=r"^--attention ort cannot compute this model: .*bidirectional window"):
        choose_attention("ort", "f32", open_source(tiny_model("gemma3", bitnet=False, bidirectional=True)).cfg, 100)


@pytest.mark.parametrize("variant", ["int8", "f32"])
def test_a_library_free_default_stays_library_free_at_32768(tiny_model, caplog, variant):
    """The stock default cannot hold one 32768-token text: ort where it computes the layers (not fused: that
    needs our library); else stock at the max_length it serves, in one warning naming --attention fused."""
    for options in (dict(arch="qwen3"), dict(arch="gemma3"), dict(arch="qwen3", bidirectional=True)):
        assert choose_attention(None, variant, open_source(tiny_model(**options)).cfg, LONG) == ("ort", LONG)
    cfg = open_source(tiny_model("gemma3", bidirectional=True)).cfg
    with caplog.at_level(logging.INFO, logger="bitnet_onnx"):
        assert choose_attention(None, variant, cfg, LONG) == ("onnx", longest_served(cfg, "onnx"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert f"max_length lowered from {LONG}" in warnings[0] and "bidirectional window" in warnings[0]
    assert "--attention fused" in warnings[0]
    assert choose_attention(None, "i2s", cfg, LONG) == ("fused", LONG)  # i2s needs the library anyway
