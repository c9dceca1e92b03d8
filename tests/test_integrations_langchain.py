"""``bitnet_onnx.integrations.langchain.BitnetOnnxEmbeddings``: LangChain's Embeddings interface over
``Embedder``, both architectures and the i2s / int8 graphs; queries and documents take the
manifest's prompts (Qwen3's EOS comes from the Embedder's tokenizer)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from embedder_calls import record_calls
from integrations_support import ARCHS, TEXTS, assert_same_vectors

pytest.importorskip("langchain_core")
from langchain_core.embeddings import Embeddings  # noqa: E402

from bitnet_onnx import Embedder  # noqa: E402
from bitnet_onnx.errors import BitnetOnnxError  # noqa: E402
from bitnet_onnx.integrations.langchain import BitnetOnnxEmbeddings  # noqa: E402


@pytest.mark.parametrize("weights", ["i2s", "int8"])
@pytest.mark.parametrize("arch", ARCHS)
def test_documents_and_queries_equal_the_embedders(tiny_model, tiny_export, arch, weights):
    folder = tiny_export(tiny_model(arch), weights=weights)
    embedder = Embedder(folder, threads=1)
    embeddings = BitnetOnnxEmbeddings(folder, threads=1)
    assert isinstance(embeddings, Embeddings)
    docs = embeddings.embed_documents(TEXTS)
    assert isinstance(docs, list) and all(isinstance(v, list) and isinstance(v[0], float) for v in docs)
    assert_same_vectors(docs, embedder.encode(TEXTS, prompt_name="document"))
    query = embeddings.embed_query(TEXTS[1])
    assert_same_vectors([query], embedder.encode([TEXTS[1]], prompt_name="query"))
    # LangChain's async methods run the sync ones in an executor
    assert_same_vectors(asyncio.run(embeddings.aembed_documents(TEXTS)), docs)


def test_prompt_names_dimensions_and_a_shared_embedder(tiny_model, tiny_export):
    folder = tiny_export(tiny_model("gemma3"), weights="int8")
    embedder = Embedder(folder, threads=1)
    embeddings = BitnetOnnxEmbeddings(embedder, dimensions=32, query_prompt_name="", document_prompt_name="query")
    assert embeddings.embedder is embedder
    assert_same_vectors([embeddings.embed_query(TEXTS[0])], embedder.encode([TEXTS[0]], prompt="", dimensions=32))
    assert_same_vectors(embeddings.embed_documents(TEXTS), embedder.encode(TEXTS, prompt_name="query", dimensions=32))
    assert np.asarray(embeddings.embed_documents(TEXTS)).shape == (len(TEXTS), 32)
    with pytest.raises(BitnetOnnxError, match="prompt_name 'nope'"):
        BitnetOnnxEmbeddings(embedder, query_prompt_name="nope").embed_query("a")


def test_documents_and_queries_each_embed_in_one_call(tiny_model, tiny_export, monkeypatch):
    folder = tiny_export(tiny_model("qwen3"), weights="int8")
    adapter = BitnetOnnxEmbeddings(folder, threads=1)
    calls = record_calls(monkeypatch)
    adapter.embed_documents(TEXTS)
    adapter.embed_query(TEXTS[0])
    assert calls == [("bitnet_onnx.integrations.langchain", "encode_document"),
                     ("bitnet_onnx.integrations.langchain", "encode_query")]
