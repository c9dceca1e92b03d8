"""The whole embedding graph: embeddings -> decoder layers -> final norm -> pooling -> Dense -> normalize.

Inputs ``input_ids`` / ``attention_mask`` int64 [batch, sequence]; outputs ``sentence_embedding``
float32 [batch, dim] (or its ``--output-precision`` encoding), ``token_embeddings`` float32 [batch, sequence, hidden]
and the same tensor as ``last_hidden_state`` (manifest.LAST_HIDDEN_STATE: what optimum and sentence-transformers'
ONNX backend read when they pick this file, the layout's onnx/model.onnx being this graph cut to it).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
import onnx

from bitnet_onnx.version import __version__
from bitnet_onnx.arch import HEAD_NORM, NORM, Projection
from bitnet_onnx.formats import ProjectionWeight
from bitnet_onnx.model_source import ModelSource
from bitnet_onnx.st_modules import StModules
from bitnet_onnx.precision import FLOAT32
from bitnet_onnx.export.builder import GraphBuilder, WeightSink
from bitnet_onnx.export.output_precision import add_output_precision
from bitnet_onnx.export import attention
from bitnet_onnx.export.layers import LayerSource, decoder_layer, layer_inputs
from bitnet_onnx.export.ops import rms_norm
from bitnet_onnx.manifest import LAST_HIDDEN_STATE, PROMPT_LENGTH_INPUT
from bitnet_onnx.export.pooling import PROMPT_POOLINGS, dense, l2_normalize, pool
from bitnet_onnx.export.projections import LinearWeights, projector


def layer_source(folder: ModelSource, variant: str, bits: int, attention_name: str, ternarize: bool,
                 attention_precision: str = "f32") -> LayerSource:
    arch, cfg = folder.arch, folder.cfg

    def norm(role: str, i: int | None) -> np.ndarray:
        w = folder.tensor(role, i)
        if arch.tensor(role).kind in (NORM, HEAD_NORM) and arch.norm_offset:
            w = (np.float32(arch.norm_offset) + w).astype(np.float32)  # fold (offset + w) once, in f32 like HF
        return w

    def linear(p: Projection, i: int) -> LinearWeights:
        weight = folder.tensor(p.weight, i)
        if folder.is_bitnet:
            norm_in = folder.tensor(p.norm_in, i)
        elif ternarize:  # speed stand-in: unit per-projection norms, as a BitNet model has them
            norm_in = np.ones(weight.shape[1], np.float32)
        else:
            norm_in = None
        stored = ProjectionWeight(weight, folder.is_bitnet or ternarize, folder.hf_name(p.weight, i),
                                  codes=folder.ternary_codes(p.weight, i))
        return LinearWeights(stored, norm_in, cfg.rms_eps)

    return LayerSource(norm, linear, projector(variant, bits), attention.strategy(attention_name, attention_precision))


def build_model(folder: ModelSource, st: StModules, variant: str, bits: int = 4, ternarize: bool = False,
                attention_name: str = "onnx", precision: str = FLOAT32,
                ranges: np.ndarray | None = None, attention_precision: str = "f32",
                weights: WeightSink | None = None) -> tuple[onnx.ModelProto, int]:
    """The model and the bytes of its weights (the writer decides on external data from it).
    ``precision`` (with its checked ``ranges``): sentence_embedding's encoding (export/output_precision.py).
    ``weights``: where the large initializers are written as they are made (export/writer.py's WeightFile)."""
    cfg = folder.cfg
    b = GraphBuilder(weights=weights)
    ids = b.add_input("input_ids", TensorProto.INT64, ["batch", "sequence"])
    mask = b.add_input("attention_mask", TensorProto.INT64, ["batch", "sequence"])
    prompt_length = None  # include_prompt: false -> leading tokens per row left out of the pooling
    if not st.include_prompt and st.pooling in PROMPT_POOLINGS:
        prompt_length = b.add_input(PROMPT_LENGTH_INPUT, TensorProto.INT64, ["batch"])
    src = layer_source(folder, variant, bits, attention_name, ternarize, attention_precision)

    with b.scope("embed_tokens"):
        table = b.initializer("weight_f16", folder.tensor_f16("token_embd"))
        h = b.op("Cast", [b.op("Gather", [table, ids], axis=0)], to=TensorProto.FLOAT)
        if cfg.embed_scale != 1.0:
            h = b.op("Mul", [h, b.const(cfg.embed_scale)], name="scale")
    li = layer_inputs(b, ids, mask, cfg)
    for i in range(cfg.n_layers):
        h = decoder_layer(b, h, i, src, cfg, li)
    tokens = rms_norm(b, h, src.norm("output_norm", None), cfg.rms_eps, name="final_norm")

    sentence = pool(b, tokens, mask, st.pooling, prompt_length)
    sentence = dense(b, sentence, st.dense)
    if st.normalize:
        sentence = l2_normalize(b, sentence)
    sentence, elem_type, shape = add_output_precision(b, sentence, precision, ranges, st.dimension or cfg.hidden)
    b.add_output(sentence, "sentence_embedding", elem_type, shape)
    b.add_output(tokens, "token_embeddings", TensorProto.FLOAT, ["batch", "sequence", cfg.hidden])
    b.add_output(tokens, LAST_HIDDEN_STATE, TensorProto.FLOAT, ["batch", "sequence", cfg.hidden])
    doc = (f"{cfg.arch.name} embedding model, weights {variant}, attention {attention_name}, "
           f"exported by bitnet-onnx {__version__}")
    return b.model(f"bitnet_onnx_{cfg.arch.name}", doc=doc, producer_version=__version__), b.weight_bytes
