"""One decoder layer, and the per-batch attention inputs (masks, rope tables) all layers share.

Driven only by ModelConfig / ArchSpec data: norms present, norm offset, activation, query scale,
layer types, sliding span and rope bases. HF semantics (modeling_qwen3.py / modeling_gemma3.py):
positions come from the attention mask (cumsum - 1), so a left-padded row equals the unpadded one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..arch import FULL, PROJECTIONS, SLIDING, ModelConfig, Projection
from .builder import GraphBuilder
from .ops import FLOAT, activation, rms_norm
from .projections import LinearWeights, project

BOOL = 9  # TensorProto.BOOL
MASKED = float(np.finfo(np.float32).min)  # finite, so fully masked (padding) query rows stay finite
_PROJ = {p.name: p for p in PROJECTIONS}


@dataclass
class AttentionInputs:
    bias: dict[str, str]  # layer type -> additive mask [B, 1, 1, S, S] (0 or MASKED)
    rope: dict[str, tuple[str, str]]  # layer type -> (cos, sin) [B, 1, S, head_dim]


@dataclass
class LayerSource:
    """What a layer reads from the checkpoint (folded norms, projection weights)."""

    norm: Callable[[str, int], np.ndarray]  # role, layer -> weight with the arch's offset folded in
    linear: Callable[[Projection, int], LinearWeights]


def inv_freq(base: float, head_dim: int) -> np.ndarray:
    """HF's default rope frequencies, in float32 like transformers computes them."""
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / (np.float32(base) ** exponent)).astype(np.float32)


def attention_inputs(b: GraphBuilder, input_ids: str, mask: str, cfg: ModelConfig) -> AttentionInputs:
    with b.scope("attention_inputs"):
        seq = b.op("Gather", [b.op("Shape", [input_ids]), b.i64(1)], axis=0, name="seq_len")
        idx = b.op("Range", [b.i64(0), seq, b.i64(1)], name="index")
        dist = b.op("Sub", [b.op("Unsqueeze", [idx, b.i64([1])]), b.op("Unsqueeze", [idx, b.i64([0])])],
                    name="query_minus_key")  # [S, S]
        keys = b.op("Unsqueeze", [b.op("Cast", [mask], to=BOOL), b.i64([1, 2, 3])], name="key_ok")  # [B,1,1,1,S]

        def bias_for(before: int | None, after: int | None, name: str) -> str:
            allowed = keys
            if before is not None:
                allowed = b.op("And", [allowed, b.op("LessOrEqual", [dist, b.i64(before)])])
            if after is not None:
                allowed = b.op("And", [allowed, b.op("GreaterOrEqual", [dist, b.i64(-after)])])
            return b.op("Where", [allowed, b.const(0.0), b.const(MASKED)], name=name)

        bias = {}
        types = set(cfg.layer_types)
        if FULL in types:
            bias[FULL] = bias_for(None, 0 if cfg.causal else None, "full_bias")
        if SLIDING in types:
            before, after = cfg.sliding_span
            bias[SLIDING] = bias_for(before, after, "sliding_bias")

        cum = b.op("CumSum", [mask, b.i64(1)])
        pos = b.op("Max", [b.op("Sub", [cum, b.i64(1)]), b.i64(0)], name="positions")
        pos_f = b.op("Unsqueeze", [b.op("Cast", [pos], to=FLOAT), b.i64([2])])  # [B, S, 1]
        rope, by_base = {}, {}
        for t in sorted(types):
            base = cfg.rope_local_theta if t == SLIDING else cfg.rope_theta
            if base not in by_base:
                with b.scope(f"rope_{t}"):
                    freqs = b.op("Mul", [pos_f, b.initializer("inv_freq", inv_freq(base, cfg.head_dim))])
                    emb = b.op("Concat", [freqs, freqs], axis=-1)
                    cos = b.op("Unsqueeze", [b.op("Cos", [emb]), b.i64([1])], name="cos")
                    sin = b.op("Unsqueeze", [b.op("Sin", [emb]), b.i64([1])], name="sin")
                    by_base[base] = (cos, sin)
            rope[t] = by_base[base]
    return AttentionInputs(bias, rope)


def _rotate(b: GraphBuilder, x: str, cos: str, sin: str, head_dim: int) -> str:
    """HF apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, x [B, H, S, head_dim]."""
    half = head_dim // 2
    x1, x2 = b.op("Split", [x, b.i64([half, half])], axis=-1, outputs=2)
    rotated = b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1, name="rotate_half")
    return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [rotated, sin])], name="rope")


def _heads(b: GraphBuilder, x: str, n: int, head_dim: int, norm: np.ndarray | None, eps: float, name: str) -> str:
    """[B, S, n*hd] -> [B, n, S, hd], with the per-head RMSNorm when given."""
    x = b.op("Reshape", [x, b.i64([0, 0, n, head_dim])], name=f"{name}_split_heads")
    if norm is not None:
        x = rms_norm(b, x, norm, eps, name=f"{name}_norm")
    return b.op("Transpose", [x], perm=[0, 2, 1, 3], name=f"{name}_heads_first")


def attention(b: GraphBuilder, x: str, i: int, src: LayerSource, cfg: ModelConfig, ai: AttentionInputs,
              variant: str, bits: int) -> str:
    layer_type = cfg.layer_types[i]
    hd, nq, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    proj = {}
    for name in ("q", "k", "v"):
        with b.scope(f"{name}_proj"):
            proj[name] = project(b, x, src.linear(_PROJ[name], i), variant, bits)
    cos, sin = ai.rope[layer_type]
    q = _heads(b, proj["q"], nq, hd, src.norm("attn_q_norm", i), cfg.rms_eps, "q")
    k = _heads(b, proj["k"], nkv, hd, src.norm("attn_k_norm", i), cfg.rms_eps, "k")
    v = _heads(b, proj["v"], nkv, hd, None, cfg.rms_eps, "v")
    with b.scope("q_rope"):
        q = _rotate(b, q, cos, sin, hd)
    with b.scope("k_rope"):
        k = _rotate(b, k, cos, sin, hd)
    # Grouped-query attention as 5-D broadcasting: query head h uses kv head h // group.
    with b.scope("sdpa"):
        q = b.op("Mul", [q, b.const(cfg.query_scale)], name="query_scale")
        q5 = b.op("Reshape", [q, b.i64([0, nkv, nq // nkv, -1, hd])], name="group_queries")
        k5 = b.op("Transpose", [b.op("Unsqueeze", [k, b.i64([2])])], perm=[0, 1, 2, 4, 3], name="keys_t")
        scores = b.op("Add", [b.op("MatMul", [q5, k5], name="scores"), ai.bias[layer_type]], name="masked")
        probs = b.op("Softmax", [scores], axis=-1)
        ctx = b.op("MatMul", [probs, b.op("Unsqueeze", [v, b.i64([2])])], name="context")
        ctx = b.op("Reshape", [ctx, b.i64([0, nq, -1, hd])], name="merge_groups")
        ctx = b.op("Transpose", [ctx], perm=[0, 2, 1, 3])
        ctx = b.op("Reshape", [ctx, b.i64([0, 0, nq * hd])], name="merge_heads")
    with b.scope("o_proj"):
        return project(b, ctx, src.linear(_PROJ["o"], i), variant, bits)


def mlp(b: GraphBuilder, x: str, i: int, src: LayerSource, cfg: ModelConfig, variant: str, bits: int) -> str:
    with b.scope("gate_proj"):
        gate = project(b, x, src.linear(_PROJ["gate"], i), variant, bits)
    with b.scope("up_proj"):
        up = project(b, x, src.linear(_PROJ["up"], i), variant, bits)
    hidden = b.op("Mul", [activation(b, gate, cfg.arch.activation), up], name="act_mul")
    with b.scope("down_proj"):
        return project(b, hidden, src.linear(_PROJ["down"], i), variant, bits)


def decoder_layer(b: GraphBuilder, h: str, i: int, src: LayerSource, cfg: ModelConfig, ai: AttentionInputs,
                  variant: str, bits: int) -> str:
    arch = cfg.arch
    with b.scope(f"layers.{i}"):
        with b.scope("attn"):
            x = rms_norm(b, h, src.norm("attn_norm", i), cfg.rms_eps, name="input_norm")
            y = attention(b, x, i, src, cfg, ai, variant, bits)
            if arch.post_attn_norm:
                y = rms_norm(b, y, src.norm(arch.post_attn_norm, i), cfg.rms_eps, name="post_norm")
        h = b.op("Add", [h, y], name="attn_residual")
        with b.scope("mlp"):
            x = rms_norm(b, h, src.norm("ffn_norm", i), cfg.rms_eps, name="pre_norm")
            y = mlp(b, x, i, src, cfg, variant, bits)
            if arch.post_ffn_norm:
                y = rms_norm(b, y, src.norm(arch.post_ffn_norm, i), cfg.rms_eps, name="post_norm")
        return b.op("Add", [h, y], name="mlp_residual")
