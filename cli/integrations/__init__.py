"""Adapters for the Python stacks people already embed with (docs/integrations.md).

Each module imports its library when it is imported itself, never from here, so the package stays
importable without them (``pip install 'bitnet-onnx[integrations]'`` installs them all):

- ``bitnet_onnx.integrations.sentence_transformers``: a ``SentenceTransformer`` over an export
  (our graph, so i2s runs; prompts, batching and ``truncate_dim`` are sentence-transformers' own);
- ``bitnet_onnx.integrations.langchain``: ``BitnetOnnxEmbeddings``, a LangChain ``Embeddings``;
- ``bitnet_onnx.integrations.llama_index``: ``BitnetOnnxEmbedding``, a LlamaIndex ``BaseEmbedding``.

An export written with ``--layout hf`` also loads in sentence-transformers' ONNX backend, optimum
and fastembed as it is (bitnet_onnx.export.hf_layout).
"""
