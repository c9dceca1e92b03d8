"""LlamaIndex: ``BitnetOnnxEmbedding``, a ``BaseEmbedding`` over ``bitnet_onnx.Embedder``.

    from llama_index.core import Settings
    from bitnet_onnx.integrations.llama_index import BitnetOnnxEmbedding
    Settings.embed_model = BitnetOnnxEmbedding(folder="./qwen3-onnx")

Queries take the manifest's "query" prompt, texts its "document" (or "passage") prompt, as
``Embedder.encode_query`` / ``encode_document`` do; ``query_prompt_name`` / ``text_prompt_name``
name others ("" for none). ``embed_batch_size`` (LlamaIndex's field) is the Embedder's batch size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.integrations._common import embedder_for, encode_options, missing

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.bridge.pydantic import Field, PrivateAttr
except ImportError as e:  # the adapter is an optional extra
    raise missing("llama-index-core", "llama-index-core", e) from None


class BitnetOnnxEmbedding(BaseEmbedding):
    folder: str = Field(description="the export folder (bitnet-onnx export -o FOLDER)")
    threads: int | None = Field(default=None, description="intra-op threads (None: ONNX Runtime's default)")
    dimensions: int | None = Field(default=None, description="keep the first N values (Matryoshka)")
    query_prompt_name: str | None = Field(default=None, description="prompt for queries (None: 'query')")
    text_prompt_name: str | None = Field(default=None, description="prompt for texts (None: 'document'/'passage')")
    _embedder: Any = PrivateAttr()

    def __init__(self, folder: str, embedder=None, **kwargs: Any):
        """``embedder``: a ready ``bitnet_onnx.Embedder`` of ``folder`` to share (else one is made)."""
        kwargs.setdefault("model_name", str(folder))
        super().__init__(folder=str(folder), **kwargs)
        if embedder is not None and Path(embedder.folder).resolve() != Path(folder).resolve():
            raise BitnetOnnxError(f"embedder runs {embedder.folder}, not folder {folder}")
        self._embedder = embedder_for(embedder if embedder is not None else self.folder,
                                      None if embedder is not None else self.threads)

    @classmethod
    def class_name(cls) -> str:
        return "BitnetOnnxEmbedding"

    def _encode_options(self, prompt_name: str | None) -> dict:
        return encode_options(self.embed_batch_size, self.dimensions, prompt_name)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embedder.encode_query([query], **self._encode_options(self.query_prompt_name))[0].tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._embedder.encode_document(list(texts), **self._encode_options(self.text_prompt_name)).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embedding(text)
