"""Attention strategies: how a layer's scaled-dot-product attention becomes ONNX nodes.

Every strategy takes the same inputs and returns the same output, so layers.py never looks at
which one runs:

- ``q`` [B, S, Hq*D], ``k`` and ``v`` [B, S, Hkv*D]: after the projections, the per-head norms and
  rotary embedding (layers.py does those, the same for every strategy);
- the layer's type (full or sliding), whose key band comes from ``ModelConfig.key_span``;
- an ``AttentionMask``: the graph's attention mask plus whatever per-graph tensors a strategy
  derives from it, built lazily so a graph only holds the ones its strategy uses.

They return the context [B, S, Hq*D], heads merged in the order o_proj reads them.

To add a strategy: write a function with ``Strategy``'s signature and add its record to ``STRATEGIES``
(docs/contributing.md). Which strategy a weight format uses by default is its record's
``default_attention`` (bitnet_onnx.formats); export/memory.py picks another when that one cannot hold
max_length.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
from onnx import TensorProto

from bitnet_onnx.arch import ModelConfig
from bitnet_onnx.customops import DOMAIN as OP_DOMAIN
from bitnet_onnx.customops.encoder_attention import NAME as FUSED_OP, PRECISIONS
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import FORMATS
from bitnet_onnx.export.builder import MS_DOMAIN, GraphBuilder

MASKED = float(np.finfo(np.float32).min)  # finite, so fully masked (padding) query rows stay finite
# a padding key's extra q.k term (``--attention ort``, bidirectional): finite, so a fully padded row stays
# finite, and times any scale far below every real score
PADDING_SCORE = -1e30


class AttentionMask:
    """The graph's ``attention_mask`` (int64 [B, S]) and the tensors strategies derive from it, once each."""

    def __init__(self, b: GraphBuilder, mask: str, seq_index: str, cfg: ModelConfig):
        self.b, self.mask, self.seq_index, self.cfg = b, mask, seq_index, cfg
        self._bias: dict[tuple, str] = {}
        self._packing: RowPacking | None = None
        self._key_padding: str | None = None

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

    def key_padding_column(self) -> str:
        """float32 [B, S, 1, 1]: 0 for a real key, PADDING_SCORE for padding (the flash MultiHeadAttention's
        extra q.k column)."""
        if self._key_padding is None:
            with self.b.scope("attention_mask"):
                is_real = self.b.op("Cast", [self.mask], to=TensorProto.BOOL)
                column = self.b.op("Where", [is_real, self.b.const(0.0), self.b.const(PADDING_SCORE)], name="key_padding")
                self._key_padding = self.b.op("Unsqueeze", [column, self.b.i64([2, 3])], name="key_padding_column")
        return self._key_padding

    def row_packing(self) -> RowPacking:
        """The gather indices that move each row's real tokens to its front, in order, and back."""
        if self._packing is None:
            self._packing = self._build_packing()
        return self._packing

    def _build_packing(self) -> RowPacking:
        b, idx = self.b, self.seq_index
        with b.scope("row_packing"):
            seq = b.op("Shape", [self.mask], start=1, end=2, name="seq_len")  # [1]
            # sort key: a real token's own index, a padding token's index + S: real ones first, each kind in order
            padding = b.op("Sub", [b.i64(1), self.mask], name="is_padding")
            key = b.op("Add", [b.op("Mul", [padding, seq]), idx], name="sort_key")  # [B, S]
            order = b.op("TopK", [key, seq], outputs=2, largest=0, sorted=1, axis=-1, name="order")[1]
            restore = b.op("TopK", [order, seq], outputs=2, largest=0, sorted=1, axis=-1, name="restore")[1]
            real = b.op("ReduceSum", [self.mask, b.i64([1])], keepdims=0, name="real_tokens")  # [B]
            # a row with no real token keeps one key (finite output; pooling ignores it)
            last_key = b.op("Max", [b.op("Sub", [real, b.i64(1)]), b.i64(0)])
            return RowPacking(
                pack=b.op("Unsqueeze", [order, b.i64([2])], name="pack_index"),
                unpack=b.op("Unsqueeze", [restore, b.i64([2])], name="unpack_index"),
                last_key=b.op("Cast", [last_key], to=TensorProto.INT32, name="last_key"),
                seq_len=b.op("Cast", [b.op("Squeeze", [seq, b.i64([0])])], to=TensorProto.INT32, name="seq_len_i32"))


@dataclass(frozen=True)
class RowPacking:
    """GroupQueryAttention reads a batch as right-padded (each row's keys are its first ``last_key + 1``):
    ``pack`` (int64 [B, S, 1], GatherND batch_dims=1) moves each row's real tokens to its front in order,
    ``unpack`` puts them back. Any padding side becomes right padding; token distances within a run of
    real tokens are kept, so sliding windows stay those of the unpacked rows."""

    pack: str
    unpack: str
    last_key: str  # int32 [B]: real tokens - 1 (GroupQueryAttention's seqlens_k)
    seq_len: str  # int32 scalar: S (its total_sequence_length)


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
    ``precision``: the op's attribute, what q.k and p.v multiply (f32, bf16 operands, or auto: the library's
    choice for its host; written only when not f32, so f32 graphs stay the ones older libraries read)."""
    cfg = am.cfg
    before, after = cfg.key_span(layer_type)
    band = {name: span for name, span in (("window_left", before), ("window_right", after)) if span is not None}
    if precision != "f32":
        band["precision"] = precision
    with b.scope("sdpa"):
        return b.op(FUSED_OP, [q, k, v, am.mask], domain=OP_DOMAIN, name="fused", num_heads=cfg.n_heads,
                    kv_num_heads=cfg.n_kv_heads, scale=float(cfg.query_scale), **band)


def ort_attention(b: GraphBuilder, q: str, k: str, v: str, layer_type: str, am: AttentionMask) -> str:
    """ONNX Runtime's own attention kernels, no op library, none holding [B, H, S, S] scores on CPU
    (onnxruntime 1.32; one 32768-token text of 16 heads, docs/attention.md): com.microsoft
    GroupQueryAttention for causal layers (its causal=0 path holds the scores), MultiHeadAttention's flash
    path for bidirectional ones (taken only without mask inputs: the padding rides in q.k,
    ``AttentionMask.key_padding_column``).
    Neither has a bidirectional window (``ort_cannot_serve``)."""
    with b.scope("sdpa"):
        if am.cfg.causal:
            return _group_query_attention(b, q, k, v, layer_type, am)
        return _flash_multi_head_attention(b, q, k, v, am)


def _group_query_attention(b: GraphBuilder, q: str, k: str, v: str, layer_type: str, am: AttentionMask) -> str:
    """GroupQueryAttention reads keys as right-padded rows: the rows are packed first (``RowPacking``)."""
    cfg = am.cfg
    before, _ = cfg.key_span(layer_type)
    rows = am.row_packing()
    packed = [b.op("GatherND", [x, rows.pack], batch_dims=1, name=f"pack_{n}") for n, x in zip("qkv", (q, k, v))]
    window = {"local_window_size": before + 1} if before is not None else {}  # its window counts the query's key
    ctx = b.op("GroupQueryAttention", [*packed, "", "", rows.last_key, rows.seq_len], outputs=3, domain=MS_DOMAIN,
               name="gqa", num_heads=cfg.n_heads, kv_num_heads=cfg.n_kv_heads, scale=float(cfg.query_scale),
               **window)[0]
    return b.op("GatherND", [ctx, rows.unpack], batch_dims=1, name="unpack")


def _flash_multi_head_attention(b: GraphBuilder, q: str, k: str, v: str, am: AttentionMask) -> str:
    """MultiHeadAttention without mask inputs (its flash path): every kv head repeated for its query heads
    (it has no groups), and one more q.k column, 1 in q and 0 or ``PADDING_SCORE`` in k, which adds
    exactly 0 to a real key's score and sinks a padding key's below every real one. The flash path also
    needs ORT to know the CPU's L2 cache size and ORT_DISABLE_FLASH_ATTENTION unset; else it holds the scores."""
    cfg = am.cfg
    hd, nq, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    q = b.op("Reshape", [q, b.i64([0, 0, nq, hd])], name="q_heads")
    k = _repeat_kv_heads(b, k, nkv, nq // nkv, hd, "k")
    v = b.op("Reshape", [_repeat_kv_heads(b, v, nkv, nq // nkv, hd, "v"), b.i64([0, 0, nq * hd])], name="v_merged")
    column_shape = b.op("Concat", [b.op("Shape", [q], end=3), b.i64([1])], axis=0, name="column_shape")  # [B, S, H, 1]
    ones = b.op("Expand", [b.const([[[[1.0]]]]), column_shape], name="ones")
    padding = b.op("Expand", [am.key_padding_column(), column_shape], name="padding")
    q = b.op("Reshape", [b.op("Concat", [q, ones], axis=-1), b.i64([0, 0, nq * (hd + 1)])], name="q_extended")
    k = b.op("Reshape", [b.op("Concat", [k, padding], axis=-1), b.i64([0, 0, nq * (hd + 1)])], name="k_extended")
    return b.op("MultiHeadAttention", [q, k, v], domain=MS_DOMAIN, name="mha", num_heads=nq,
                scale=float(cfg.query_scale))


def _repeat_kv_heads(b: GraphBuilder, x: str, nkv: int, group: int, hd: int, name: str) -> str:
    """[B, S, nkv*D] -> [B, S, nkv*group, D], each kv head repeated for the ``group`` query heads it serves."""
    x = b.op("Reshape", [x, b.i64([0, 0, nkv, 1, hd])], name=f"{name}_heads")
    x = b.op("Expand", [x, b.i64([1, 1, 1, group, 1])], name=f"{name}_repeated")
    return b.op("Reshape", [x, b.i64([0, 0, nkv * group, hd])], name=f"{name}_query_heads")


def ort_cannot_serve(cfg: ModelConfig) -> str | None:
    """Why ONNX Runtime's own kernels cannot compute ``cfg``'s layers (None when they can)."""
    banded = [t for t in sorted(set(cfg.layer_types)) if cfg.key_span(t) not in ((None, 0), (None, None))]
    if not cfg.causal and banded:
        return (f"neither GroupQueryAttention nor MultiHeadAttention has a bidirectional window "
                f"(its {banded[0]} layers see {cfg.key_span(banded[0])} tokens before and after)")
    return None


@dataclass(frozen=True)
class AttentionStrategy:
    """One ``--attention`` choice: what builds it and the facts the exporter and the cost model read."""

    build: Strategy
    holds_scores: bool  # materializes [B, H, S, S] scores (export/memory.py's per-pair cost)
    library_free: bool  # runs on ONNX Runtime's own ops alone (no bitnet_onnx op library)
    min_onnxruntime: str | None = None  # the ORT it needs, when newer than the weight format's floor
    cannot_serve: Callable[[ModelConfig], str | None] = lambda cfg: None  # why not, for a model it cannot compute


# --attention name -> strategy
STRATEGIES: dict[str, AttentionStrategy] = {
    "onnx": AttentionStrategy(onnx_attention, holds_scores=True, library_free=True),
    "fused": AttentionStrategy(fused_attention, holds_scores=False, library_free=False),
    # 1.32: the release measured; 1.21's GroupQueryAttention held [B, H, S, S] scores
    "ort": AttentionStrategy(ort_attention, holds_scores=False, library_free=True, min_onnxruntime="1.32",
                             cannot_serve=ort_cannot_serve),
}


# --attention-precision: what the fused op's q.k and p.v multiply, when none is given. auto: the op library
# picks on the host that runs the graph (bf16 where its bf16 path is measured faster than f32, AMX-BF16 today;
# f32 elsewhere: docs/attention.md, "Precision"), since an export cannot know its host. f32 and bf16 stay
# explicit choices.
DEFAULT_PRECISION = "auto"


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
    return STRATEGIES[name].build


def choose(name: str | None, variant: str, cfg: ModelConfig | None = None) -> str:
    """The strategy name for ``--attention name`` (None: the weight format's default); an error when
    ``cfg``'s layers are ones it cannot compute."""
    name = name or FORMATS[variant].default_attention
    if name not in STRATEGIES:
        raise BitnetOnnxError(f"--attention {name!r} is not one of {', '.join(STRATEGIES)}")
    why = STRATEGIES[name].cannot_serve(cfg) if cfg is not None else None
    if why:
        raise BitnetOnnxError(f"--attention {name} cannot compute this model: {why}; use --attention onnx or fused")
    return name
