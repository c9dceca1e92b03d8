"""fastembed's local-model path (``add_custom_model`` + ``specific_model_path``) on an export with the
HF layout: the ORT-native graphs (int8, nbits) give ``Embedder.encode``'s vectors for both
architectures, through ``onnx/model.onnx`` with fastembed's own pooling and through our
``model.onnx``'s ``sentence_embedding`` (pooling, Dense and normalize in the graph). fastembed makes
its own SessionOptions and takes no custom op library, so the i2s graph does not load there."""

from __future__ import annotations

import numpy as np
import pytest

from integrations_support import ARCHS, TEXTS, LayoutExports, assert_same_vectors

pytest.importorskip("fastembed")
from fastembed import TextEmbedding  # noqa: E402
from fastembed.common.model_description import ModelSource, PoolingType  # noqa: E402

from bitnet_onnx import Embedder  # noqa: E402
from bitnet_onnx.export.hf_layout import HF_MODEL_FILE  # noqa: E402
from bitnet_onnx.manifest import MODEL_NAME, Manifest  # noqa: E402

# our pooling name -> fastembed's, for onnx/model.onnx (token embeddings out)
FASTEMBED_POOLING = {"mean": PoolingType.MEAN, "cls": PoolingType.CLS, "lasttoken": PoolingType.LAST_TOKEN}


@pytest.fixture(scope="module")
def layout_export(tiny_model, tmp_path_factory):
    return LayoutExports(tiny_model, tmp_path_factory.mktemp("fastembed"))


def fastembed_model(folder, graph: str) -> TextEmbedding:
    """A TextEmbedding of ``folder``: ``graph`` "tokens" = onnx/model.onnx with fastembed's pooling and
    normalization per the manifest; "sentence" = model.onnx's sentence_embedding as it is."""
    manifest = Manifest.read(folder)
    name = f"bitnet-onnx/{folder.name}-{graph}"
    if name not in {m["model"] for m in TextEmbedding.list_supported_models()}:
        if graph == "tokens":
            options = dict(pooling=FASTEMBED_POOLING[manifest.pooling], normalization=manifest.normalize,
                           model_file=HF_MODEL_FILE)
        else:
            options = dict(pooling=PoolingType.DISABLED, normalization=False, model_file=MODEL_NAME,
                           output_name="sentence_embedding")
        TextEmbedding.add_custom_model(model=name, sources=ModelSource(hf=name), dim=manifest.dimension, **options)
    return TextEmbedding(model_name=name, specific_model_path=str(folder), threads=1)


@pytest.mark.parametrize("graph", ["tokens", "sentence"])
@pytest.mark.parametrize("weights", ["int8", "nbits"])
@pytest.mark.parametrize("arch", ARCHS)
def test_fastembed_gives_the_embedders_vectors(layout_export, arch, weights, graph):
    folder = layout_export(arch, weights)
    embedder = Embedder(folder, threads=1)
    model = fastembed_model(folder, graph)
    # one batch on both sides: nbits vectors move by ~5e-5 in cosine with the batch's padded width
    # (MatMulNBits on other shapes), which Embedder alone shows too
    assert_same_vectors(np.stack(list(model.embed(TEXTS, batch_size=len(TEXTS)))), embedder.encode(TEXTS, prompt=""))
    # fastembed has no prompts of its own: a prompt is put in front of the texts by the caller
    query = embedder.prompts["query"]
    assert_same_vectors(np.stack(list(model.embed([query + t for t in TEXTS]))),
                        embedder.encode(TEXTS, prompt_name="query"))


def test_qwen3s_eos_reaches_fastembed(layout_export):
    folder = layout_export("qwen3", "int8")
    eos = Manifest.read(folder).append_eos_token_id
    model = fastembed_model(folder, "tokens")
    encodings = model.model.tokenize(TEXTS)  # fastembed's tokenizer, as configured from the folder
    assert all(e.ids[sum(e.attention_mask) - 1] == eos for e in encodings)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_i2s_graph_does_not_load_in_fastembed(layout_export, arch):
    folder = layout_export(arch, "i2s")
    with pytest.raises(Exception, match="I2STernaryMatMul|EncoderAttention|bitnet_onnx"):
        fastembed_model(folder, "sentence")
