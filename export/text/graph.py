"""The strings -> (input_ids, attention_mask[, prompt_length]) model: the prompt, the tokenizer front and
the ids rules put together, once the probe check has passed."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto

from bitnet_onnx.export.builder import GraphBuilder
from bitnet_onnx.export.text import front, probe, prompt as prompts
from bitnet_onnx.export.text.rules import IdsRules
from bitnet_onnx.manifest import PROMPT_LENGTH_INPUT, TEXT_INPUT, Manifest
from bitnet_onnx.special_tokens import IdsRule
from bitnet_onnx.tokenizer_json import TOKENIZER_JSON, TokenizerJson, read_tokenizer_json

INT64 = TensorProto.INT64
IDS, MASK = "input_ids", "attention_mask"
SPECIALS_A_ROW_MAY_LOSE = 2  # the tokenizer op's cap is max_length plus these (later ids are cut anyway)


def preprocess_model(tokenizer: TokenizerJson | Path, manifest: Manifest, opset: int, ir_version: int,
                     prompt_length: bool = False) -> onnx.ModelProto:
    """The strings -> (input_ids, attention_mask[, prompt_length]) model of ``tokenizer`` (parsed once by
    the caller, ``read_tokenizer_json``; or a folder holding tokenizer.json, read here); ``prompt_length``:
    also the prompt's own token count less one, per text (pooling that leaves the prompt out). Refuses
    (BitnetOnnxError) a tokenizer the graph cannot run exactly."""
    if not isinstance(tokenizer, TokenizerJson):
        tokenizer = read_tokenizer_json(Path(tokenizer) / TOKENIZER_JSON)
    nfc = front.needs_nfc(tokenizer.data)
    node = front.tokenizer_node(tokenizer, int(manifest.max_length) + SPECIALS_A_ROW_MAY_LOSE)
    front_session = front.front_session(node, nfc, opset, ir_version)
    frames = probe.special_frames(tokenizer, front_session)
    probe.check_tokenizer(tokenizer, front_session, frames, front.row_cap(node))
    IdsRule(frames[1], manifest.append_eos_token_id, int(manifest.max_length)).check(str(tokenizer.path))

    b = GraphBuilder(opset=opset, const_prefix=f"/{front.SCOPE}")
    text = b.add_input(TEXT_INPUT, TensorProto.STRING, ["batch"])
    with b.scope(front.SCOPE):
        prompt = prompts.add_prompt_input(b, manifest)
        full = b.op("StringConcat", [prompt, text], name="prompt_and_text")
        if prompt_length:
            full = prompts.with_prompt_row(b, prompt, full)
        raw = front.add_front(b, full, node, nfc)
        if prompt_length:
            prompt_raw, raw = prompts.split_prompt_row(b, raw)
        ids, mask = IdsRules(b, *raw, manifest, *frames).build()
        if prompt_length:
            count = prompts.prompt_length(b, IdsRules(b, *prompt_raw, manifest, *frames), prompt, text)
    b.add_output(ids, IDS, INT64, ["batch", "sequence"])
    b.add_output(mask, MASK, INT64, ["batch", "sequence"])
    if prompt_length:
        b.add_output(count, PROMPT_LENGTH_INPUT, INT64, ["batch"])
    model = b.model("bitnet_onnx_text_input", doc="texts -> input_ids, attention_mask")
    model.ir_version = ir_version
    return model
