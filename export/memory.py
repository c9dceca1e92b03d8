"""The activation cost model an export records in its manifest, and the attention choice it bounds.

One session run of B texts padded to S tokens takes about ``B * S * (per_token + S * per_pair)``
bytes of activations (``Manifest.batch_bytes``). ``per_token`` counts the float32 tensors a layer
holds at once (residual, q/k/v, the FFN's gate, up and product, the outputs); ``per_pair`` is the
attention's: the stock decomposition materializes its scores, masked scores and probabilities
[B, H, S, S] and one additive bias [B, 1, S, S] per key band (plus the band's bool/int64 steps),
the strategies that hold no scores (EncoderAttention, ONNX Runtime's kernels) none. Both are upper bounds:
on Qwen3-0.6B and Gemma3-270M shapes (Sapphire Rapids, onnxruntime 1.2x) the measured peak of stock
attention at S = 4096 was 0.3-0.5x of it.

``choose_attention`` picks the strategy of an export: the weight format's default when it serves
max_length for one text within ``ACTIVATION_BUDGET_BYTES``; else, for a library-free default,
ONNX Runtime's own attention kernels (``--attention ort``) when they compute the model's layers (the
graph stays library-free), or the default with the max_length it serves, in one warning naming ``--attention
fused``. An explicit ``--attention onnx`` that cannot serve it gets that max_length too (the same
warning), so every export runs its own max_length on a 24 GB host.
"""

from __future__ import annotations

import logging
import math

from bitnet_onnx.arch import ModelConfig
from bitnet_onnx.io import size_text
from bitnet_onnx.manifest import ACTIVATION_BUDGET_BYTES
from bitnet_onnx.export import attention

log = logging.getLogger("bitnet_onnx")

FLOAT = 4  # bytes of a float32 activation
FUSED = "fused"
LIBRARY_FREE_LONG = "ort"  # a library-free default's way to a max_length its own attention cannot hold


def bytes_per_token(cfg: ModelConfig) -> int:
    """Activation bytes per token of one layer's live float32 tensors (upper bound)."""
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return FLOAT * (4 * cfg.hidden + 3 * cfg.ffn + 2 * (q + 2 * kv))


def bytes_per_token_pair(cfg: ModelConfig, strategy: str) -> int:
    """Attention bytes per (query, key) pair of one text: scores, masked scores and probabilities per
    query head plus each key band's bias and its bool/int64 steps (stock); 0 for a strategy without scores."""
    if not attention.STRATEGIES[strategy].holds_scores:
        return 0
    bands = len({cfg.key_span(t) for t in cfg.layer_types})
    return FLOAT * 3 * cfg.n_heads + (FLOAT + 8 + 2) * bands


def one_text_bytes(cfg: ModelConfig, strategy: str, length: int) -> int:
    return length * (bytes_per_token(cfg) + length * bytes_per_token_pair(cfg, strategy))


def longest_served(cfg: ModelConfig, strategy: str, budget: int = ACTIVATION_BUDGET_BYTES) -> int:
    """The longest text ``strategy`` runs within ``budget`` bytes (one text)."""
    a, b = bytes_per_token_pair(cfg, strategy), bytes_per_token(cfg)
    if a == 0:
        return budget // b
    return int((-b + math.sqrt(b * b + 4 * a * budget)) / (2 * a))


def choose_attention(requested: str | None, variant: str, cfg: ModelConfig, max_length: int) -> tuple[str, int]:
    """(strategy, max_length) of an export: see the module docstring."""
    name = attention.choose(requested, variant, cfg)
    if one_text_bytes(cfg, name, max_length) <= ACTIVATION_BUDGET_BYTES:
        return name, max_length
    need = size_text(one_text_bytes(cfg, name, max_length))
    why_not_long = attention.STRATEGIES[LIBRARY_FREE_LONG].cannot_serve(cfg)
    if requested is None and attention.STRATEGIES[name].library_free and why_not_long is None:
        log.info("attention: %s (ONNX Runtime's own attention kernels): the %s default, %s, would need %s for one "
                 "text of max_length %d (budget %s)", LIBRARY_FREE_LONG, variant, name, need, max_length,
                 size_text(ACTIVATION_BUDGET_BYTES))
        return LIBRARY_FREE_LONG, max_length
    served = longest_served(cfg, name)
    because = f"; ONNX Runtime's own attention kernels cannot compute this model: {why_not_long}" if requested is None else ""
    log.warning("attention %s: max_length lowered from %d to %d, the longest text its [1, %d, S, S] tensors hold "
                "in %s (%d tokens would need %s)%s; --attention fused serves %d with the bitnet_onnx op library",
                name, max_length, served, cfg.n_heads, size_text(ACTIVATION_BUDGET_BYTES), max_length, need, because,
                max_length)
    return name, served


def cost_fields(cfg: ModelConfig, strategy: str) -> dict[str, int]:
    """The manifest's cost-model fields for an export of ``cfg`` with ``strategy``."""
    return {"activation_bytes_per_token": bytes_per_token(cfg),
            "attention_bytes_per_token_pair": bytes_per_token_pair(cfg, strategy)}

