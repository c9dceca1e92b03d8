"""``bitnet_onnx.integrations.llama_index.BitnetOnnxEmbedding``: LlamaIndex's BaseEmbedding over
``Embedder``, both architectures and the i2s / int8 graphs; queries and texts take the manifest's
prompts, batches follow ``embed_batch_size``."""

from __future__ import annotations

import asyncio

import pytest

from embedder_calls import record_calls
from integrations_support import ARCHS, TEXTS, assert_same_vectors

pytest.importorskip("llama_index.core")
from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402

from bitnet_onnx import Embedder  # noqa: E402
from bitnet_onnx.integrations.llama_index import BitnetOnnxEmbedding  # noqa: E402


@pytest.mark.parametrize("weights", ["i2s", "int8"])
@pytest.mark.parametrize("arch", ARCHS)
def test_texts_and_queries_equal_the_embedders(tiny_model, tiny_export, arch, weights):
    folder = tiny_export(tiny_model(arch), weights=weights)
    embedder = Embedder(folder, threads=1)
    model = BitnetOnnxEmbedding(folder=str(folder), threads=1, embed_batch_size=2)
    assert isinstance(model, BaseEmbedding)
    assert model.model_name == str(folder)
    docs = embedder.encode(TEXTS, prompt_name="document")
    assert_same_vectors(model.get_text_embedding_batch(TEXTS), docs)
    assert_same_vectors([model.get_text_embedding(TEXTS[3])], docs[3:4])
    assert_same_vectors([model.get_query_embedding(TEXTS[1])], embedder.encode([TEXTS[1]], prompt_name="query"))
    assert_same_vectors([asyncio.run(model.aget_query_embedding(TEXTS[1]))],
                        embedder.encode([TEXTS[1]], prompt_name="query"))
    assert_same_vectors(asyncio.run(model.aget_text_embedding_batch(TEXTS)), docs)


def test_prompt_names_dimensions_and_a_shared_embedder(tiny_model, tiny_export):
    folder = tiny_export(tiny_model("qwen3"), weights="int8")
    embedder = Embedder(folder, threads=1)
    model = BitnetOnnxEmbedding(folder=str(folder), embedder=embedder, dimensions=16,
                                query_prompt_name="document", text_prompt_name="")
    assert_same_vectors([model.get_query_embedding(TEXTS[0])],
                        embedder.encode([TEXTS[0]], prompt_name="document", dimensions=16))
    assert_same_vectors(model.get_text_embedding_batch(TEXTS), embedder.encode(TEXTS, prompt="", dimensions=16))


def test_documents_and_queries_each_embed_in_one_call(tiny_model, tiny_export, monkeypatch):
    folder = tiny_export(tiny_model("qwen3"), weights="int8")
    adapter = BitnetOnnxEmbedding(folder=str(folder), threads=1)
    calls = record_calls(monkeypatch)
    adapter.get_text_embedding_batch(TEXTS)
    adapter.get_query_embedding(TEXTS[0])
    assert calls == [("bitnet_onnx.integrations.llama_index", "encode_document"),
                     ("bitnet_onnx.integrations.llama_index", "encode_query")]
