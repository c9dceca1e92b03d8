"""Attention strategies: how a layer's scaled-dot-product attention becomes ONNX nodes.

Every strategy takes the same inputs and returns the same output, so layers.py never looks at
which one runs:

- ``q`` [B, S, Hq*D], ``k`` and ``v`` [B, S, Hkv*D]: after the projections, the per-head norms and
  rotary embedding (layers.py does those, the same for every strategy);
- the layer's type (full or sliding), whose key band comes from ``ModelConfig.key_span``;
- an ``AttentionMask``: the graph's attention mask plus whatever per-graph tensors a strategy
  derives from it, built lazily so a graph only holds the ones its strategy uses.

They return the context [B, S, Hq*D], heads merged in the order o_proj reads them.

To add a strategy: write a function with ``Strategy``'s signature and add a row to ``STRATEGIES``
(docs/contributing.md). Which strategy a weight format uses by default is its record's
``default_attention`` (bitnet_onnx.formats).
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
from onnx import TensorProto

from bitnet_onnx.arch import ModelConfig
from bitnet_onnx.customops import DOMAIN as OP_DOMAIN
from bitnet_onnx.customops.encoder_attention import NAME as FUSED_OP, PRECISIONS
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import FORMATS
from bitnet_onnx.export.builder import GraphBuilder

MASKED = float(np.finfo(np.float32).min)  # finite, so fully masked (padding) query rows stay finite


class AttentionMask:
    """The graph's ``attention_mask`` (int64 [B, S]) and the tensors strategies derive from it, once each."""

    def __init__(self, b: GraphBuilder, mask: str, seq_index: str, cfg: ModelConfig):
        self.b, self.mask, self.seq_index, self.cfg = b, mask, seq_index, cfg
        self._bias: dict[tuple, str] = {}

    def additive_bias(self, layer_type: str) -> str:
        """[B, 1, S, S] float32: 0 where query i may see key j, MASKED elsewhere (padding and band)."""
        span = self.cfg.key_span(layer_type)
        if span not in self._bias:
            self._bias[span] = self._build_bias(*span, name=f"bias_{len(self._bias)}")
        return self._bias[span]

    def _build_bias(self, before: int | None, after: int | None, name: str) -> str:
        b, idx = self.b, self.seq_index
        with b.scope("attention_mask"):
            allowed = b.op("Unsqueeze", [b.op("Cast", [self.mask], to=TensorProto.BOOL), b.i64([1, 2])],
                           name="key_ok")  # [B, 1, 1, S]
            if before is not None or after is not None:
                dist = b.op("Sub", [b.op("Unsqueeze", [idx, b.i64([1])]), b.op("Unsqueeze", [idx, b.i64([0])])],
                            name="query_minus_key")  # [S, S]
                if before is not None:
                    allowed = b.op("And", [allowed, b.op("LessOrEqual", [dist, b.i64(before)])])
                if after is not None:
                    allowed = b.op("And", [allowed, b.op("GreaterOrEqual", [dist, b.i64(-after)])])
            return b.op("Where", [allowed, b.const(0.0), b.const(MASKED)], name=name)


Strategy = Callable[[GraphBuilder, str, str, str, str, AttentionMask], str]


def onnx_attention(b: GraphBuilder, q: str, k: str, v: str, layer_type: str, am: AttentionMask) -> str:
    """Stock ONNX ops: MatMul, additive mask bias, Softmax, MatMul; runs on any ONNX Runtime.

    Grouped-query attention in 4-D: the G query heads sharing a kv head are stacked along the
    sequence axis ([B, KV, G*S, D]), so each kv head is one larger GEMM (measured 0.85-0.99x the
    time of 5-D broadcasting; ONNX Attention-23 was no faster and needs ORT >= 1.23).
    """
    cfg = am.cfg
    hd, nq, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    with b.scope("sdpa"):
        q = _heads_first(b, b.op("Mul", [q, b.const(cfg.query_scale)], name="query_scale"), nq, hd, "q")
        k = _heads_first(b, k, nkv, hd, "k")
        v = _heads_first(b, v, nkv, hd, "v")
        qg = b.op("Reshape", [q, b.i64([0, nkv, -1, hd])], name="group_queries")
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2], name="keys_t")
        scores = b.op("Reshape", [b.op("MatMul", [qg, kt], name="scores"), b.i64([0, nq, -1, 0])], name="per_head")
        probs = b.op("Softmax", [b.op("Add", [scores, am.additive_bias(layer_type)], name="masked")], axis=-1)
        probs = b.op("Reshape", [probs, b.i64([0, nkv, -1, 0])], name="group_probs")
        ctx = b.op("MatMul", [probs, v], name="context")  # [B, KV, G*S, D]
        ctx = b.op("Reshape", [ctx, b.i64([0, nq, -1, hd])], name="merge_groups")
        ctx = b.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        return b.op("Reshape", [ctx, b.i64([0, 0, nq * hd])], name="merge_heads")


def _heads_first(b: GraphBuilder, x: str, n: int, head_dim: int, name: str) -> str:
    """[B, S, n*D] -> [B, n, S, D]."""
    x = b.op("Reshape", [x, b.i64([0, 0, n, head_dim])], name=f"{name}_heads")
    return b.op("Transpose", [x], perm=[0, 2, 1, 3], name=f"{name}_heads_first")


def fused_attention(b: GraphBuilder, q: str, k: str, v: str, layer_type: str, am: AttentionMask,
                    precision: str = "f32") -> str:
    """One EncoderAttention node of the bitnet_onnx op library (docs/attention.md): flash-style, no
    [B, H, S, S] tensors, key tiles outside the band skipped; reads the mask itself (no bias).
    ``precision``: the op's attribute, what q.k and p.v multiply (f32, or bf16 operands; written only
    when not f32, so f32 graphs stay the ones older libraries read)."""
    cfg = am.cfg
    before, after = cfg.key_span(layer_type)
    band = {name: span for name, span in (("window_left", before), ("window_right", after)) if span is not None}
    if precision != "f32":
        band["precision"] = precision
    with b.scope("sdpa"):
        return b.op(FUSED_OP, [q, k, v, am.mask], domain=OP_DOMAIN, name="fused", num_heads=cfg.n_heads,
                    kv_num_heads=cfg.n_kv_heads, scale=float(cfg.query_scale), **band)


# --attention name -> strategy
STRATEGIES: dict[str, Strategy] = {"onnx": onnx_attention, "fused": fused_attention}


# --attention-precision: what the fused op's q.k and p.v multiply, when none is given. f32: bf16 passes the
# accuracy gate on a trained model but moves the untrained i2s test models' embeddings to cos 0.9996-0.9998
# of the stock attention (tests/test_attention_export.py asks 0.999999), and is slower than f32 where the
# CPU has AVX512-BF16 without AMX-BF16 (docs/attention.md, "Precision").
DEFAULT_PRECISION = "f32"


def choose_precision(precision: str | None, strategy: str) -> str:
    """The fused op's precision for ``--attention-precision`` (None: DEFAULT_PRECISION for ``fused``; the
    stock ``onnx`` strategy is float32 MatMuls, so only f32 goes with it)."""
    if precision is not None and precision not in PRECISIONS:
        raise BitnetOnnxError(f"--attention-precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if strategy != "fused":
        if precision not in (None, "f32"):
            raise BitnetOnnxError(f"--attention-precision {precision} needs --attention fused "
                                  f"(--attention {strategy} is float32 ONNX MatMuls)")
        return "f32"
    return precision or DEFAULT_PRECISION


def strategy(name: str, precision: str = "f32") -> Strategy:
    """The strategy ``name`` with the fused op's ``precision`` (choose_precision) bound."""
    if name == "fused":
        return functools.partial(fused_attention, precision=precision)
    return STRATEGIES[name]


def choose(name: str | None, variant: str) -> str:
    """The strategy name for ``--attention name`` (None: the weight format's default)."""
    name = name or FORMATS[variant].default_attention
    if name not in STRATEGIES:
        raise BitnetOnnxError(f"--attention {name!r} is not one of {', '.join(STRATEGIES)}")
    return name
