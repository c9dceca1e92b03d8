"""Strings in, embeddings out: the exporter's step that puts the tokenizer and the manifest's rules as
ONNX in front of the model.

``bitnet-onnx export --text-input`` writes, next to ``model.onnx`` (ids in), ``model_text.onnx``: the
same model (same weights, same external data file) behind a pre-processing graph

    text: string [N], prompt: string [1] (optional, default: the manifest's default prompt or "")
      -> StringConcat(prompt, text)  (and the prompt alone in row 0 when the pooling leaves it out)
      -> UTF-8 guard: bytes that are not UTF-8 (or U+0000) are an ORT error naming the reason
      -> NormalizeNFC (our op) when tokenizer.json's normalizer is NFC
      -> the tokenizer: our ByteFallbackBpe for SentencePiece-style BPE with byte fallback (Gemma3),
         else onnxruntime-extensions' HfJsonTokenizer built by the extensions' own
         ``gen_processing_models`` (byte-level BPE: Qwen3)
      -> the special tokens of tokenizer.json's post-processor, the EOS rule, truncation to
         max_length (the text cut, the special tokens kept: bitnet_onnx.special_tokens), the mask from the true lengths, padding on the manifest's side
      -> the model: sentence_embedding, token_embeddings, plus input_ids and attention_mask
         (and prompt_length, the prompt's tokens less one, for include_prompt: false poolings).

The parts, one job each, in ``bitnet_onnx.export.text``: ``front`` (the tokenizer node per family,
the UTF-8 guard, NFC), ``prompt`` (the optional prompt input, the prompt's length), ``rules`` (specials,
EOS, truncation, padding, mask), ``probe`` (the check against the ``tokenizers`` library: the export
refuses a tokenizer that differs on its probe corpus), ``graph`` (them put together). This module
joins that graph to the model's (``onnx.compose.merge_graphs``) and sets the manifest's text fields.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from bitnet_onnx import customops
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.export.builder import EXTENSIONS_DOMAIN
from bitnet_onnx.export.text.graph import IDS, MASK, preprocess_model
from bitnet_onnx.manifest import PROMPT_LENGTH_INPUT, TEXT_MODEL_NAME, Manifest
from bitnet_onnx.tokenizer_json import TokenizerJson

MODEL_OUTPUTS = ("sentence_embedding", "token_embeddings")


def compose(pre: onnx.ModelProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """``pre`` feeding ``model`` (one graph, by onnx.compose); the model's initializers are shared, not
    copied, when ``model`` already points at external data."""
    outputs = [o.name for o in model.graph.output if o.name in MODEL_OUTPUTS] + [IDS, MASK]
    fed = {i.name for i in model.graph.input}
    io_map = [(name, name) for name in (IDS, MASK, PROMPT_LENGTH_INPUT) if name in fed]
    graph = onnx.compose.merge_graphs(pre.graph, model.graph, io_map=io_map,
                                      outputs=outputs, name=model.graph.name + "_text", doc_string=model.doc_string)
    order = {name: i for i, name in enumerate(outputs)}
    ordered = sorted(graph.output, key=lambda o: order[o.name])
    del graph.output[:]
    graph.output.extend(ordered)
    opsets = {o.domain: o.version for o in model.opset_import}
    for o in pre.opset_import:
        if opsets.setdefault(o.domain, o.version) != o.version:
            raise BitnetOnnxError(f"--text-input: opset {o.domain or 'ai.onnx'} {o.version} of the tokenizer graph "
                                  f"differs from the model's {opsets[o.domain]}")
    text_model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
                                   producer_name=model.producer_name, producer_version=model.producer_version)
    text_model.ir_version = model.ir_version
    text_model.doc_string = model.doc_string + "; strings in (tokenizer in the graph)"
    return text_model


def opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def save_text_model(folder: Path, pre: onnx.ModelProto, model: onnx.ModelProto) -> Path:
    """Writes ``pre`` + ``model`` as folder/model_text.onnx. Call after model.onnx was saved from ``model``:
    weights that went to external data are then references to the same file, not a second copy."""
    path = folder / TEXT_MODEL_NAME
    onnx.save_model(compose(pre, model), str(path))
    return path


def text_input_for(tokenizer: TokenizerJson | Path, manifest: Manifest, model: onnx.ModelProto) -> onnx.ModelProto:
    """The exporter's step: the pre-processing graph for ``model``, and the manifest's text fields set.
    ``tokenizer``: the source's tokenizer.json as the exporter parsed it (``read_tokenizer_json``), or
    the folder holding it."""
    pools_without_prompt = any(i.name == PROMPT_LENGTH_INPUT for i in model.graph.input)
    pre = preprocess_model(tokenizer, manifest, opset_of(model), model.ir_version, pools_without_prompt)
    manifest.text_model_file = TEXT_MODEL_NAME
    manifest.text_custom_ops = sorted({n.op_type for n in pre.graph.node if n.domain == customops.DOMAIN})
    manifest.text_needs_extensions = any(n.domain == EXTENSIONS_DOMAIN for n in pre.graph.node)
    return pre
