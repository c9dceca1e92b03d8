"""The OpenAI-compatible embedding classes of LangChain (langchain-openai's OpenAIEmbeddings) and
LlamaIndex (llama-index-embeddings-openai's OpenAIEmbedding) against ``bitnet-onnx serve`` on a
loopback port: the recipe of docs/integrations.md gives ``Embedder.encode``'s vectors for both
architectures. OpenAI's API has no prompt field, so a query prompt is put in front by the caller."""

from __future__ import annotations

import pytest

from integrations_support import ARCHS, TEXTS, assert_same_vectors

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("langchain_openai")
pytest.importorskip("llama_index.embeddings.openai")
from langchain_openai import OpenAIEmbeddings  # noqa: E402
from live_server import LiveServer  # noqa: E402
from llama_index.embeddings.openai import OpenAIEmbedding  # noqa: E402

from bitnet_onnx import Embedder  # noqa: E402


@pytest.fixture(scope="module", params=ARCHS)
def served(request, tiny_model, tiny_export):
    """(base url, Embedder) of a server on 127.0.0.1 running the i2s export of one architecture."""
    folder = tiny_export(tiny_model(request.param), weights="i2s")
    # auto_truncate: TEXTS holds a text past max_length, which a default server refuses as OpenAI does
    # (test_serve); these clients cannot cut by the model's tokens, so the server cuts as encode does
    server = LiveServer(folder, model_name=f"tiny-{request.param}", auto_truncate=True)
    yield server.url + "/v1", Embedder(folder, threads=1)
    server.close()


def test_langchain_openai_embeddings(served):
    base_url, embedder = served
    # check_embedding_ctx_length=False: send the texts; by default the class sends tiktoken's ids of
    # OpenAI's own vocabulary, which are not this model's tokens
    embeddings = OpenAIEmbeddings(model="tiny", base_url=base_url, api_key="unused",
                                  check_embedding_ctx_length=False, max_retries=0)
    assert_same_vectors(embeddings.embed_documents(TEXTS), embedder.encode(TEXTS))
    query = embedder.prompts["query"]
    assert_same_vectors([embeddings.embed_query(query + TEXTS[1])], embedder.encode([TEXTS[1]], prompt_name="query"))
    assert_same_vectors(OpenAIEmbeddings(model="tiny", base_url=base_url, api_key="unused", dimensions=32,
                                         check_embedding_ctx_length=False).embed_documents(TEXTS),
                        embedder.encode(TEXTS, dimensions=32))


def test_llama_index_openai_embedding(served):
    base_url, embedder = served
    # the class accepts only OpenAI's model names; the server answers for its one model whatever is sent
    model = OpenAIEmbedding(model="text-embedding-3-small", api_base=base_url, api_key="unused",
                            embed_batch_size=2, max_retries=0)
    assert_same_vectors(model.get_text_embedding_batch(TEXTS), embedder.encode(TEXTS))
    # the class sends every text with its newlines replaced by spaces: a prompt with a newline
    # (Qwen3's instruction) arrives changed, so the vector is that of the changed text
    query = embedder.prompts["query"]
    sent = (query + TEXTS[1]).replace("\n", " ")
    assert_same_vectors([model.get_query_embedding(query + TEXTS[1])], embedder.encode([sent], prompt=""))
