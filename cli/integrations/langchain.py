"""LangChain: ``BitnetOnnxEmbeddings``, an ``Embeddings`` over ``bitnet_onnx.Embedder``.

    from bitnet_onnx.integrations.langchain import BitnetOnnxEmbeddings
    embeddings = BitnetOnnxEmbeddings("./qwen3-onnx")
    vectors = embeddings.embed_documents(["first passage", "second passage"])
    query = embeddings.embed_query("what is BitNet?")   # the export's "query" prompt, when it has one

Queries take the manifest's "query" prompt and documents its "document" (or "passage") prompt, as
``Embedder.encode_query`` / ``encode_document`` do; ``query_prompt_name`` / ``document_prompt_name``
name others ("" for none).
"""

from __future__ import annotations

from typing import Sequence

from bitnet_onnx.integrations._common import embedder_for, encode_options, missing

try:
    from langchain_core.embeddings import Embeddings
except ImportError as e:  # the adapter is an optional extra
    raise missing("langchain-core", "langchain-core", e) from None


class BitnetOnnxEmbeddings(Embeddings):
    """``model``: an export folder or an ``Embedder``; ``dimensions``: keep the first N values (Matryoshka)."""

    def __init__(self, model, *, threads: int | None = None, batch_size: int = 32, dimensions: int | None = None,
                 query_prompt_name: str | None = None, document_prompt_name: str | None = None):
        self.embedder = embedder_for(model, threads)
        self.batch_size = batch_size
        self.dimensions = dimensions
        self.query_prompt_name = query_prompt_name
        self.document_prompt_name = document_prompt_name

    def _encode_options(self, prompt_name: str | None) -> dict:
        return encode_options(self.batch_size, self.dimensions, prompt_name)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embedder.encode_document(list(texts), **self._encode_options(self.document_prompt_name)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embedder.encode_query([text], **self._encode_options(self.query_prompt_name))[0].tolist()
