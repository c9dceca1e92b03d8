"""Pooling, Dense modules and L2 normalization inside the graph (sentence-transformers semantics).

Token picks use the attention mask, never the row length, so they are right for left and right
padding: lasttoken = the last position whose mask is 1, cls = the first such position. No ArgMax
(int64 ArgMax has no ORT CPU kernel); the index comes from ReduceMax over mask-weighted positions.

``include_prompt: false`` in 1_Pooling/config.json (sentence-transformers leaves the prompt's tokens
out of the mean): the graph then has a third input, ``prompt_length`` int64 [batch], the number of
leading real tokens of each row to leave out; the runtime feeds sentence-transformers' count
(the prompt's own token count minus one, ``Embedder.prompt_length``), 0 for texts without a prompt.
Counting real tokens (CumSum of the mask) makes it right for either padding side.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from bitnet_onnx.st_modules import L2_NORM_EPS, DenseLayer
from bitnet_onnx.export.builder import GraphBuilder
from bitnet_onnx.export.ops import activation



def _positions(b: GraphBuilder, mask: str) -> str:
    seq = b.op("Gather", [b.op("Shape", [mask]), b.i64(1)], axis=0)
    return b.op("Range", [b.i64(0), seq, b.i64(1)], name="positions")  # [S]


def _gather_rows(b: GraphBuilder, hidden: str, index: str) -> str:
    """hidden [B, S, H], index int64 [B, 1] -> [B, H]."""
    return b.op("GatherND", [hidden, index], batch_dims=1, name="pick")


def last_token(b: GraphBuilder, hidden: str, mask: str) -> str:
    one_based = b.op("Mul", [mask, b.op("Add", [_positions(b, mask), b.i64(1)])])
    last = b.op("Sub", [b.op("ReduceMax", [one_based, b.i64([1])], keepdims=1), b.i64(1)])
    return _gather_rows(b, hidden, b.op("Max", [last, b.i64(0)], name="last_index"))


def first_token(b: GraphBuilder, hidden: str, mask: str) -> str:
    seq = b.op("Gather", [b.op("Shape", [mask]), b.i64([1])], axis=0)  # [1]
    from_end = b.op("Sub", [seq, _positions(b, mask)])  # S - position: largest at the first real token
    best = b.op("ReduceMax", [b.op("Mul", [mask, from_end]), b.i64([1])], keepdims=1)
    first = b.op("Sub", [seq, best])
    return _gather_rows(b, hidden, b.op("Min", [first, b.op("Sub", [seq, b.i64(1)])], name="first_index"))


def mean(b: GraphBuilder, hidden: str, mask: str) -> str:
    m = b.op("Unsqueeze", [b.op("Cast", [mask], to=TensorProto.FLOAT), b.i64([2])])  # [B, S, 1]
    total = b.op("ReduceSum", [b.op("Mul", [hidden, m]), b.i64([1])], keepdims=0)
    count = b.op("Max", [b.op("ReduceSum", [m, b.i64([1])], keepdims=0), b.const(1e-9)])
    return b.op("Div", [total, count], name="mean")


POOLERS = {"lasttoken": last_token, "cls": first_token, "mean": mean}
PROMPT_POOLINGS = ("mean",)  # cls and lasttoken pick one token, never a prompt token


def without_prompt(b: GraphBuilder, mask: str, prompt_length: str) -> str:
    """``mask`` with each row's first ``prompt_length`` real tokens cleared."""
    rank = b.op("CumSum", [mask, b.i64(1)])  # 1-based rank among the row's real tokens
    after = b.op("Greater", [rank, b.op("Unsqueeze", [prompt_length, b.i64([1])])])
    return b.op("Mul", [mask, b.op("Cast", [after], to=TensorProto.INT64)], name="mask_without_prompt")


def pool(b: GraphBuilder, hidden: str, mask: str, mode: str, prompt_length: str | None = None) -> str:
    """``prompt_length``: the graph input of include_prompt=false models (mean pooling only)."""
    with b.scope(f"pooling_{mode}"):
        if prompt_length is not None and mode in PROMPT_POOLINGS:
            mask = without_prompt(b, mask, prompt_length)
        return POOLERS[mode](b, hidden, mask)


def dense(b: GraphBuilder, x: str, layers: list[DenseLayer]) -> str:
    for i, layer in enumerate(layers):
        with b.scope(f"dense.{i}"):
            x = b.op("MatMul", [x, b.initializer("weight", np.ascontiguousarray(layer.weight.T, np.float32))])
            if layer.bias is not None:
                x = b.op("Add", [x, b.initializer("bias", layer.bias.astype(np.float32))])
            x = activation(b, x, layer.activation)
    return x


def l2_normalize(b: GraphBuilder, x: str) -> str:
    with b.scope("normalize"):
        norm = b.op("ReduceL2", [x, b.i64([-1])], keepdims=1)
        return b.op("Div", [x, b.op("Max", [norm, b.const(L2_NORM_EPS)])])
