"""``bitnet_onnx.integrations.sentence_transformers``: a SentenceTransformer over an export's own graph
gives ``Embedder.encode``'s vectors for both architectures and every weight variant (i2s on our op
library), with the manifest's prompts, Qwen3's EOS, ``truncate_dim`` and ``normalize_embeddings``."""

from __future__ import annotations

import numpy as np
import pytest

from embedder_calls import record_calls
from integrations_support import ARCHS, TEXTS, assert_same_vectors

# a plain import (sentence-transformers is in the test extra): a broken install, or its quantization module
# moved (the package imports it), fails these tests instead of skipping them (tests/test_precision.py checks)
from sentence_transformers import SentenceTransformer

from bitnet_onnx import Embedder
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.integrations.sentence_transformers import BitnetOnnxModule, sentence_transformer


@pytest.mark.parametrize("weights", ["i2s", "int8", "nbits"])
@pytest.mark.parametrize("arch", ARCHS)
def test_sentence_transformer_gives_the_embedders_vectors(tiny_model, tiny_export, arch, weights):
    folder = tiny_export(tiny_model(arch), weights=weights)
    embedder = Embedder(folder, threads=1)
    model = sentence_transformer(folder, threads=1)
    assert isinstance(model, SentenceTransformer)
    assert model.get_embedding_dimension() == embedder.dimension
    assert model.prompts == embedder.prompts
    assert_same_vectors(model.encode(TEXTS, batch_size=32), embedder.encode(TEXTS))
    for name in embedder.prompts:
        assert_same_vectors(model.encode(TEXTS, prompt_name=name), embedder.encode(TEXTS, prompt_name=name))
    assert_same_vectors(model.encode_query(TEXTS), embedder.encode_query(TEXTS))
    one = model.encode(TEXTS[1], prompt="custom: ")
    assert one.shape == (embedder.dimension,)
    assert_same_vectors(one[None], embedder.encode([TEXTS[1]], prompt="custom: "))


def test_qwen3s_eos_and_truncation(tiny_model, tiny_export):
    folder = tiny_export(tiny_model("qwen3"), weights="int8")
    embedder = Embedder(folder, threads=1)
    module = sentence_transformer(folder)[0]
    assert isinstance(module, BitnetOnnxModule)
    long_text = "The quick brown fox jumps over the lazy dog. " * 60
    features = module.preprocess([TEXTS[0], long_text])
    lengths = features["attention_mask"].sum(1).tolist()
    assert lengths[1] == embedder.manifest.max_length
    for row, n in zip(features["input_ids"].tolist(), lengths):
        assert row[n - 1] == embedder.manifest.append_eos_token_id  # right padding: the EOS ends each text


def test_truncate_dim_and_normalize(tiny_model, tiny_export):
    folder = tiny_export(tiny_model("gemma3"), weights="i2s")
    embedder = Embedder(folder, threads=1)
    model = sentence_transformer(folder, truncate_dim=32)
    got = model.encode(TEXTS, normalize_embeddings=True)
    assert got.shape == (len(TEXTS), 32)
    assert_same_vectors(got, embedder.encode(TEXTS, dimensions=32))
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


def test_a_shared_embedder_and_bad_arguments(tiny_model, tiny_export):
    folder = tiny_export(tiny_model("qwen3"), weights="int8")
    embedder = Embedder(folder, threads=1)
    assert sentence_transformer(embedder)[0].embedder is embedder
    with pytest.raises(BitnetOnnxError, match="threads"):
        sentence_transformer(embedder, threads=2)
    with pytest.raises(BitnetOnnxError, match="export folder or a bitnet_onnx.Embedder"):
        sentence_transformer(42)
    with pytest.raises(BitnetOnnxError, match="manifest missing"):
        sentence_transformer(tiny_model("qwen3"))  # the source folder, not an export


@pytest.mark.parametrize("arch", ARCHS)
def test_encode_precision_gives_the_embedders_bytes(tiny_model, tiny_export, arch):
    """sentence-transformers' own encode(precision=...) on the adapter = Embedder.encode(precision=...);
    its int8 / uint8 take the batch's own ranges, which Embedder takes as given ranges."""
    from bitnet_onnx.precision import NAMES, calibration_ranges

    folder = tiny_export(tiny_model(arch))
    embedder = Embedder(folder, threads=1)
    model = sentence_transformer(embedder)
    batch_ranges = calibration_ranges(embedder.encode(TEXTS))
    for name in NAMES:
        got = model.encode(TEXTS, precision=name)
        want = embedder.encode(TEXTS, precision=name, ranges=batch_ranges)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), name


def test_each_batch_is_one_prepare_and_one_embed(tiny_model, tiny_export, monkeypatch):
    """The module reaches nothing inside the Embedder: preprocess prepares a batch, forward embeds it."""
    folder = tiny_export(tiny_model("gemma3"), weights="int8")
    model = sentence_transformer(folder, threads=1)
    calls = record_calls(monkeypatch)
    got = model.encode(TEXTS, batch_size=2, prompt_name="query")
    module = "bitnet_onnx.integrations.sentence_transformers"
    batches = -(-len(TEXTS) // 2)
    assert calls == [(module, "prepare"), (module, "embed")] * batches
    monkeypatch.undo()
    embedder = Embedder(folder, threads=1)
    assert_same_vectors(got, embedder.encode(TEXTS, prompt_name="query"))
    with pytest.raises(TypeError, match="its own preprocess"):
        model[0].forward({"input_ids": None, "attention_mask": None})
