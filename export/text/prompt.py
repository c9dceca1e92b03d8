"""The prompt of the strings-in graph: an optional input put before every text, and, for poolings that
leave the prompt out (include_prompt: false), its own token count.

The input is of ONNX optional type: a host that feeds no prompt gets the manifest's default prompt
(a constant inside the graph). It is not an initializer named ``prompt`` listed among the graph's
inputs, the usual way to give an input a default, because ORT warns about each such initializer on
every session it loads.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from bitnet_onnx.export.builder import GraphBuilder
from bitnet_onnx.export.text.rules import IdsRules
from bitnet_onnx.manifest import PROMPT_INPUT, Manifest

PROMPT_ROWS = 1  # with a prompt length to count, the prompt alone is row 0 of the tokenizer's batch


def default_prompt(manifest: Manifest) -> str:
    """The manifest's default prompt (its ``default_prompt_name``), else ""."""
    name = manifest.default_prompt_name
    return manifest.prompts.get(name, "") if name else ""


def add_prompt_input(b: GraphBuilder, manifest: Manifest) -> str:
    """The ``prompt`` input (string [1]), defaulting to the manifest's default prompt."""
    return b.add_optional_input(PROMPT_INPUT, TensorProto.STRING, [1],
                                default=np.array([default_prompt(manifest)], dtype=object))


def with_prompt_row(b: GraphBuilder, prompt: str, texts: str) -> str:
    """The prompt alone before the texts (one tokenizer run for both; ``split_prompt_row`` parts them)."""
    return b.op("Concat", [prompt, texts], axis=0, name="prompt_row_and_texts")


def split_prompt_row(b: GraphBuilder, values: list[str]) -> tuple[list[str], list[str]]:
    """(the prompt's rows, the texts' rows) of each of ``values`` ([1 + N, ...] each)."""
    parts = {}
    for key, start, end in (("prompt", 0, PROMPT_ROWS), ("texts", PROMPT_ROWS, np.iinfo(np.int64).max)):
        parts[key] = [b.op("Slice", [x, b.i64([start]), b.i64([end]), b.i64([0])], name=f"{key}_rows")
                      for x in values]
    return parts["prompt"], parts["texts"]


def prompt_length(b: GraphBuilder, prompt_rules: IdsRules, prompt: str, texts: str) -> str:
    """Per text, the prompt's tokens with tokenizer.json's specials less one (sentence-transformers'
    count; Embedder.prompt_length); 0 for an empty prompt. ``prompt_rules``: the rules on the prompt's row."""
    count = b.op("Max", [b.op("Sub", [prompt_rules.full_length(), b.i64(1)]), b.i64(0)])
    empty = b.op("Equal", [prompt, b.const([""], dtype=object)], name="prompt_is_empty")
    count = b.op("Where", [empty, b.i64([0]), count], name="prompt_tokens")
    return b.op("Expand", [count, b.op("Shape", [texts])], name="prompt_length")
