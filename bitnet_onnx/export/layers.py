"""One decoder layer, and the per-batch attention inputs (masks, rope tables) all layers share.

Driven only by ModelConfig / ArchSpec data: norms present, norm offset, activation, query scale,
layer types, sliding span and rope bases. HF semantics (modeling_qwen3.py / modeling_gemma3.py):
positions come from the attention mask (cumsum - 1), so a left-padded row equals the unpadded one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from bitnet_onnx.arch import FULL, PROJECTIONS, SLIDING, ModelConfig, Projection
from bitnet_onnx.export.builder import MS_DOMAIN, GraphBuilder
from bitnet_onnx.export.ops import FLOAT, activation, rms_norm
from bitnet_onnx.export.projections import LinearWeights, project

BOOL = 9  # TensorProto.BOOL
MASKED = float(np.finfo(np.float32).min)  # finite, so fully masked (padding) query rows stay finite
_PROJ = {p.name: p for p in PROJECTIONS}


@dataclass
class AttentionInputs:
    bias: dict[str, str]  # layer type -> additive mask [B, 1, S, S] (0 or MASKED)
    rope: dict[str, tuple[str, str]]  # layer type -> (cos, sin) caches [S, head_dim / 2] for positions 0..S-1
    positions: str  # int64 [B, S]: cumsum(mask) - 1, clamped at 0


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
        keys = b.op("Unsqueeze", [b.op("Cast", [mask], to=BOOL), b.i64([1, 2])], name="key_ok")  # [B, 1, 1, S]

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
        # positions never exceed S - 1: caches for 0..S-1 serve every row, padded or not
        idx_f = b.op("Unsqueeze", [b.op("Cast", [idx], to=FLOAT), b.i64([1])])  # [S, 1]
        rope, by_base = {}, {}
        for t in sorted(types):
            base = cfg.rope_local_theta if t == SLIDING else cfg.rope_theta
            if base not in by_base:
                with b.scope(f"rope_{t}"):
                    freqs = b.op("Mul", [idx_f, b.initializer("inv_freq", inv_freq(base, cfg.head_dim))])
                    by_base[base] = (b.op("Cos", [freqs], name="cos"), b.op("Sin", [freqs], name="sin"))
            rope[t] = by_base[base]
    return AttentionInputs(bias, rope, pos)


def _heads(b: GraphBuilder, x: str, n: int, head_dim: int, norm: np.ndarray | None, eps: float, name: str,
           rope: tuple[str, str] | None = None, positions: str | None = None) -> str:
    """[B, S, n*hd] -> [B, n, S, hd], with the per-head RMSNorm and rotary embedding when given.

    Rotary: com.microsoft RotaryEmbedding (rotate-half form, interleaved=0), HF's apply_rotary_pos_emb.
    """
    if norm is not None:
        x = b.op("Reshape", [x, b.i64([0, 0, n, head_dim])], name=f"{name}_split_heads")
        x = rms_norm(b, x, norm, eps, name=f"{name}_norm")
        x = b.op("Reshape", [x, b.i64([0, 0, n * head_dim])], name=f"{name}_merge_heads")
    if rope is not None:
        b.use_domain(MS_DOMAIN, 1)
        x = b.op("RotaryEmbedding", [x, positions, rope[0], rope[1]], domain=MS_DOMAIN, name=f"{name}_rope",
                 num_heads=n, interleaved=0)
    x = b.op("Reshape", [x, b.i64([0, 0, n, head_dim])], name=f"{name}_heads")
    return b.op("Transpose", [x], perm=[0, 2, 1, 3], name=f"{name}_heads_first")


def attention(b: GraphBuilder, x: str, i: int, src: LayerSource, cfg: ModelConfig, ai: AttentionInputs,
              variant: str, bits: int) -> str:
    layer_type = cfg.layer_types[i]
    hd, nq, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    proj = {}
    for name in ("q", "k", "v"):
        with b.scope(f"{name}_proj"):
            proj[name] = project(b, x, src.linear(_PROJ[name], i), variant, bits)
    rope = ai.rope[layer_type]
    q = _heads(b, proj["q"], nq, hd, src.norm("attn_q_norm", i), cfg.rms_eps, "q", rope, ai.positions)
    k = _heads(b, proj["k"], nkv, hd, src.norm("attn_k_norm", i), cfg.rms_eps, "k", rope, ai.positions)
    v = _heads(b, proj["v"], nkv, hd, None, cfg.rms_eps, "v")
    # Grouped-query attention in 4-D: the G query heads sharing a kv head are stacked along the
    # sequence axis ([B, KV, G*S, hd]), so each kv head is one larger GEMM (measured 0.85-0.99x the
    # time of 5-D broadcasting; ONNX Attention-23 was no faster and needs ORT >= 1.23).
    with b.scope("sdpa"):
        q = b.op("Mul", [q, b.const(cfg.query_scale)], name="query_scale")
        qg = b.op("Reshape", [q, b.i64([0, nkv, -1, hd])], name="group_queries")
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2], name="keys_t")
        scores = b.op("Reshape", [b.op("MatMul", [qg, kt], name="scores"), b.i64([0, nq, -1, 0])], name="per_head")
        probs = b.op("Softmax", [b.op("Add", [scores, ai.bias[layer_type]], name="masked")], axis=-1)
        probs = b.op("Reshape", [probs, b.i64([0, nkv, -1, 0])], name="group_probs")
        ctx = b.op("MatMul", [probs, v], name="context")  # [B, KV, G*S, hd]
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
