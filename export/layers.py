"""One decoder layer, and the per-batch inputs (mask, rope tables, positions) all layers share.

Driven only by ModelConfig / ArchSpec data: norms present, norm offset, activation, query scale,
layer types, sliding span and rope bases. HF semantics (modeling_qwen3.py / modeling_gemma3.py):
positions come from the attention mask (cumsum - 1), so a left-padded row equals the unpadded one.
How a projection or the attention core becomes nodes is the LayerSource's strategy
(projections.py, attention.py): layer code never looks at the weight variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from onnx import TensorProto

from bitnet_onnx.arch import PROJECTIONS, SLIDING, ModelConfig, Projection
from bitnet_onnx.export.attention import AttentionMask, Strategy
from bitnet_onnx.export.builder import MS_DOMAIN, GraphBuilder
from bitnet_onnx.export.ops import activation, rms_norm
from bitnet_onnx.export.projections import LinearWeights, Projector

_PROJ = {p.name: p for p in PROJECTIONS}


@dataclass
class LayerInputs:
    """Per-batch tensors every layer reads."""

    mask: AttentionMask
    rope: dict[str, tuple[str, str]]  # layer type -> (cos, sin) caches [S, head_dim / 2] for positions 0..S-1
    positions: str  # int64 [B, S]: cumsum(mask) - 1, clamped at 0


@dataclass
class LayerSource:
    """What a layer reads from the checkpoint, and how its projections and attention become nodes."""

    norm: Callable[[str, int], np.ndarray]  # role, layer -> weight with the arch's offset folded in
    linear: Callable[[Projection, int], LinearWeights]
    project: Projector  # the weight variant's projection strategy
    attend: Strategy  # the attention strategy

    def projection(self, b: GraphBuilder, x: str, name: str, i: int) -> str:
        with b.scope(f"{name}_proj"):
            return self.project(b, x, self.linear(_PROJ[name], i))


def inv_freq(base: float, head_dim: int) -> np.ndarray:
    """HF's default rope frequencies, in float32 like transformers computes them."""
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / (np.float32(base) ** exponent)).astype(np.float32)


def layer_inputs(b: GraphBuilder, input_ids: str, mask: str, cfg: ModelConfig) -> LayerInputs:
    with b.scope("layer_inputs"):
        seq = b.op("Gather", [b.op("Shape", [input_ids]), b.i64(1)], axis=0, name="seq_len")
        idx = b.op("Range", [b.i64(0), seq, b.i64(1)], name="index")
        cum = b.op("CumSum", [mask, b.i64(1)])
        pos = b.op("Max", [b.op("Sub", [cum, b.i64(1)]), b.i64(0)], name="positions")
        # positions never exceed S - 1: caches for 0..S-1 serve every row, padded or not
        idx_f = b.op("Unsqueeze", [b.op("Cast", [idx], to=TensorProto.FLOAT), b.i64([1])])  # [S, 1]
        rope, by_base = {}, {}
        for t in sorted(set(cfg.layer_types)):
            base = cfg.rope_local_theta if t == SLIDING else cfg.rope_theta
            if base not in by_base:
                with b.scope(f"rope_{t}"):
                    freqs = b.op("Mul", [idx_f, b.initializer("inv_freq", inv_freq(base, cfg.head_dim))])
                    by_base[base] = (b.op("Cos", [freqs], name="cos"), b.op("Sin", [freqs], name="sin"))
            rope[t] = by_base[base]
    return LayerInputs(AttentionMask(b, mask, idx, cfg), rope, pos)


def _norm_rope(b: GraphBuilder, x: str, n: int, head_dim: int, norm: np.ndarray | None, eps: float, name: str,
               rope: tuple[str, str] | None = None, positions: str | None = None) -> str:
    """[B, S, n*hd] with the per-head RMSNorm and rotary embedding applied when given.

    Rotary: com.microsoft RotaryEmbedding (rotate-half form, interleaved=0), HF's apply_rotary_pos_emb.
    """
    if norm is not None:
        x = b.op("Reshape", [x, b.i64([0, 0, n, head_dim])], name=f"{name}_split_heads")
        x = rms_norm(b, x, norm, eps, name=f"{name}_norm")
        x = b.op("Reshape", [x, b.i64([0, 0, n * head_dim])], name=f"{name}_merge_heads")
    if rope is not None:
        x = b.op("RotaryEmbedding", [x, positions, rope[0], rope[1]], domain=MS_DOMAIN, name=f"{name}_rope",
                 num_heads=n, interleaved=0)
    return x


def attention(b: GraphBuilder, x: str, i: int, src: LayerSource, cfg: ModelConfig, li: LayerInputs) -> str:
    layer_type = cfg.layer_types[i]
    hd, nq, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    q, k, v = (src.projection(b, x, name, i) for name in ("q", "k", "v"))
    rope = li.rope[layer_type]
    q = _norm_rope(b, q, nq, hd, src.norm("attn_q_norm", i), cfg.rms_eps, "q", rope, li.positions)
    k = _norm_rope(b, k, nkv, hd, src.norm("attn_k_norm", i), cfg.rms_eps, "k", rope, li.positions)
    ctx = src.attend(b, q, k, v, layer_type, li.mask)
    return src.projection(b, ctx, "o", i)


def mlp(b: GraphBuilder, x: str, i: int, src: LayerSource, cfg: ModelConfig) -> str:
    gate, up = src.projection(b, x, "gate", i), src.projection(b, x, "up", i)
    hidden = b.op("Mul", [activation(b, gate, cfg.arch.activation), up], name="act_mul")
    return src.projection(b, hidden, "down", i)


def decoder_layer(b: GraphBuilder, h: str, i: int, src: LayerSource, cfg: ModelConfig, li: LayerInputs) -> str:
    arch = cfg.arch
    with b.scope(f"layers.{i}"):
        with b.scope("attn"):
            x = rms_norm(b, h, src.norm("attn_norm", i), cfg.rms_eps, name="input_norm")
            y = attention(b, x, i, src, cfg, li)
            if arch.post_attn_norm:
                y = rms_norm(b, y, src.norm(arch.post_attn_norm, i), cfg.rms_eps, name="post_norm")
        h = b.op("Add", [h, y], name="attn_residual")
        with b.scope("mlp"):
            x = rms_norm(b, h, src.norm("ffn_norm", i), cfg.rms_eps, name="pre_norm")
            y = mlp(b, x, i, src, cfg)
            if arch.post_ffn_norm:
                y = rms_norm(b, y, src.norm(arch.post_ffn_norm, i), cfg.rms_eps, name="post_norm")
        return b.op("Add", [h, y], name="mlp_residual")
