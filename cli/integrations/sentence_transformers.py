"""sentence-transformers over an export's own graph: ``sentence_transformer(folder)``.

    from bitnet_onnx.integrations.sentence_transformers import sentence_transformer
    model = sentence_transformer("./qwen3-onnx")                 # a SentenceTransformer
    docs = model.encode(["first passage", "second passage"])
    query = model.encode("what is BitNet?", prompt_name="query", truncate_dim=256)

The SentenceTransformer holds one module, ``BitnetOnnxModule``: our tokenizer rules (Qwen3's EOS,
truncation, padding) and the exported model.onnx, whose pooling, Dense head and normalization are
in the graph, on the session ``Embedder`` makes (the op library registered when the graph needs
it, so i2s runs). ``preprocess`` is ``Embedder.prepare`` (its request rides in the features beside
the padded ids sentence-transformers shows), ``forward`` is ``Embedder.embed`` of that request. Prompts, batching, ``normalize_embeddings``, ``truncate_dim`` and ``similarity``
are sentence-transformers' own; the prompts come from the export's manifest. No optimum needed:
this is the way to run an export in sentence-transformers where optimum cannot be installed next
to the transformers in use (docs/integrations.md).
"""

from __future__ import annotations

from typing import Any, Sequence

from bitnet_onnx.integrations._common import embedder_for, missing

try:
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import InputModule
except ImportError as e:  # the adapter is an optional extra
    raise missing("sentence-transformers (6.x)", "sentence-transformers", e) from None

SENTENCE_EMBEDDING = "sentence_embedding"
PREPARED = "bitnet_onnx_prepared"  # the features' key of preprocess's Embedder.prepare request


class BitnetOnnxModule(InputModule):
    """Texts -> ``sentence_embedding`` with an export's graph (the whole model in one module)."""

    def __init__(self, model, threads: int | None = None):
        """``model``: an export folder or a ``bitnet_onnx.Embedder``."""
        super().__init__()
        self.embedder = embedder_for(model, threads)

    def preprocess(self, inputs: Sequence[str], prompt: str | None = None, task: str | None = None,
                   **kwargs) -> dict[str, Any]:
        """``task`` (encode_query / encode_document's route for a Router) has one route here: the graph."""
        if kwargs:
            raise TypeError(f"BitnetOnnxModule.preprocess takes no options beyond prompt and task, got {sorted(kwargs)}")
        # The graph's own rows (no dimensions, no normalize): truncate_dim and normalize_embeddings are
        # sentence-transformers' steps after the module.
        prepared = self.embedder.prepare(list(inputs), prompt=prompt or "")
        input_ids, mask = prepared.padded()
        return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask),
                "prompt_length": torch.full((len(prepared),), prepared.prompt_length, dtype=torch.int64),
                PREPARED: prepared}

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        if PREPARED not in features:
            raise TypeError("BitnetOnnxModule.forward takes the features of its own preprocess")
        prepared = features[PREPARED]
        # sentence-transformers' batch, cut as Embedder.encode cuts (token and memory budgets)
        rows = self.embedder.embed(prepared, batch_size=max(len(prepared), 1))
        features[SENTENCE_EMBEDDING] = torch.from_numpy(rows)
        return features

    def get_embedding_dimension(self) -> int:
        return self.embedder.dimension

    get_sentence_embedding_dimension = get_embedding_dimension  # sentence-transformers < 6's name

    def get_max_seq_length(self) -> int:
        return int(self.embedder.manifest.max_length)

    @property
    def max_seq_length(self) -> int:
        return self.get_max_seq_length()

    def save(self, output_path: str, *args, **kwargs) -> None:
        raise NotImplementedError(f"BitnetOnnxModule runs the export {self.embedder.folder}; copy that folder "
                                  "instead of saving the SentenceTransformer")


def sentence_transformer(model, threads: int | None = None, **kwargs: Any) -> SentenceTransformer:
    """A ``SentenceTransformer`` over the export ``model`` (a folder or an ``Embedder``), with the
    manifest's prompts and default prompt. ``kwargs`` go to SentenceTransformer (e.g. ``truncate_dim``,
    ``similarity_fn_name``); it runs on the CPU (ONNX Runtime), whatever ``device`` says."""
    module = BitnetOnnxModule(model, threads)
    manifest = module.embedder.manifest
    kwargs.setdefault("prompts", dict(manifest.prompts))
    kwargs.setdefault("default_prompt_name", manifest.default_prompt_name)
    kwargs.setdefault("device", "cpu")
    return SentenceTransformer(modules=[module], **kwargs)
