"""Ternary weights, I2_S packing and the numpy reference of the I2STernaryMatMul op.

One packer for every writer: the ONNX exporter stores ``pack_i2s(T)`` as the op's W input and
the GGUF writer stores the same bytes followed by the f32 scale. Numerics follow docs/architecture.md
("Numerics"); the C++ kernels are tested against ``i2s_matmul_reference``.
"""

from __future__ import annotations

import numpy as np

BLOCK = 128  # values per I2_S block
BLOCK_BYTES = 32  # bytes per I2_S block
WEIGHT_EPS = 1e-5  # floor of the absmean weight scale
ACT_EPS = 1e-5  # floor of the per-token absmax


def ternarize(w: np.ndarray) -> tuple[np.ndarray, float]:
    """Absmean ternarization: ``T = clamp(round(W / s_w), -1, 1)`` with ``s_w = max(mean|W|, 1e-5)``.

    Returns ``(T int8, s_w)`` so that ``W ~= s_w * T``. Rounds half to even, in float32.
    """
    w = np.asarray(w, dtype=np.float32)
    if not np.all(np.isfinite(w)):
        raise ValueError("weight has non-finite values (NaN or Inf)")
    s_w = np.float32(max(float(np.mean(np.abs(w), dtype=np.float64)), WEIGHT_EPS))
    t = np.clip(np.rint(w / s_w), -1, 1).astype(np.int8)
    return t, float(s_w)


def pack_i2s(t: np.ndarray) -> np.ndarray:
    """Pack ternary values [N, K] (K % 128 == 0) into I2_S bytes [N, K/4].

    Codes -1 -> 0b00, 0 -> 0b01, +1 -> 0b10; byte p of each 128-value block holds values
    p, p+32, p+64, p+96 in bits 7-6, 5-4, 3-2, 1-0.
    """
    t = np.asarray(t)
    if t.ndim != 2:
        raise ValueError(f"pack_i2s expects a 2-D [N, K] array, got shape {t.shape}")
    n, k = t.shape
    if k % BLOCK:
        raise ValueError(f"pack_i2s: K={k} is not a multiple of {BLOCK}")
    if t.size and (t.min() < -1 or t.max() > 1):
        raise ValueError("pack_i2s: values must be in {-1, 0, +1}")
    codes = (t.astype(np.int16) + 1).astype(np.uint8).reshape(n, k // BLOCK, 4, BLOCK_BYTES)
    packed = (codes[:, :, 0] << 6) | (codes[:, :, 1] << 4) | (codes[:, :, 2] << 2) | codes[:, :, 3]
    return packed.reshape(n, k // 4)


def unpack_i2s(packed: np.ndarray, k: int | None = None) -> np.ndarray:
    """Inverse of :func:`pack_i2s`: I2_S bytes [N, K/4] -> int8 [N, K]. Code 0b11 reads as 0."""
    packed = np.asarray(packed, dtype=np.uint8)
    if packed.ndim != 2:
        raise ValueError(f"unpack_i2s expects a 2-D [N, K/4] array, got shape {packed.shape}")
    n, kb = packed.shape
    if k is not None and k != kb * 4:
        raise ValueError(f"unpack_i2s: K={k} does not match {kb} bytes per row")
    if kb % BLOCK_BYTES:
        raise ValueError(f"unpack_i2s: row of {kb} bytes is not a whole number of {BLOCK_BYTES}-byte blocks")
    blocks = packed.reshape(n, kb // BLOCK_BYTES, 1, BLOCK_BYTES)
    shifts = np.array([6, 4, 2, 0], dtype=np.uint8).reshape(1, 1, 4, 1)
    codes = (blocks >> shifts) & 0b11
    t = codes.astype(np.int8) - 1
    t[codes == 0b11] = 0
    return t.reshape(n, kb * 4)


def rms_norm_f32(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm as the op fuses it: sum of squares in float64, the rest in float32.

    ``x * float32(1 / sqrt(mean(x^2) + eps)) * w`` evaluated left to right in float32.
    """
    x = np.asarray(x, dtype=np.float32)
    ms = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    eps = float(np.float32(eps))  # the op's epsilon attribute is a float32
    inv_rms = (1.0 / np.sqrt(ms + eps)).astype(np.float32)
    return (x * inv_rms) * np.asarray(weight, dtype=np.float32)


def quantize_activations(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-token absmax int8: returns ``(q int8 [..., K], a float32 [...], sum_q int32 [...])``.

    ``a = 127 / max(max|x|, 1e-5)`` and ``q = clamp(round_half_even(x * a), -128, 127)``, float32.
    A row holding NaN or Inf gets q = 0 and a = NaN, so its outputs are NaN.
    """
    x = np.asarray(x, dtype=np.float32)
    finite = np.all(np.isfinite(x), axis=-1)
    absmax = np.max(np.abs(np.where(np.isfinite(x), x, 0)), axis=-1, initial=0.0).astype(np.float32)
    a = (np.float32(127.0) / np.maximum(absmax, np.float32(ACT_EPS))).astype(np.float32)
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint(np.where(finite[..., None], x, 0) * a[..., None]), -128, 127).astype(np.int8)
    a = np.where(finite, a, np.float32(np.nan)).astype(np.float32)
    return q, a, q.astype(np.int32).sum(axis=-1, dtype=np.int32)


def i2s_integer_sums(q: np.ndarray, packed: np.ndarray) -> np.ndarray:
    """Exact int32 sums ``sum_k q[m, k] * T[n, k]`` -> [..., N]; what every kernel must reproduce.

    Summed by float64 BLAS, not numpy's integer matmul (no BLAS, ~50x slower): every product and partial
    sum is an integer of magnitude at most 128 * K, exact in float64 for any K below 2^45, whatever the
    order; the int64 -> int32 cast then wraps as int32 arithmetic would."""
    t = unpack_i2s(packed).astype(np.float64)
    return np.rint(np.asarray(q, dtype=np.float64) @ t.T).astype(np.int64).astype(np.int32)


def i2s_matmul_reference(
    x: np.ndarray,
    w_packed: np.ndarray,
    scale: np.ndarray | float,
    norm_weight: np.ndarray | None = None,
    eps: float = 1e-6,
) -> np.ndarray:
    """Numpy reference of ``I2STernaryMatMul``: X [..., K] f32 -> Y [..., N] f32.

    Optional fused RMSNorm, per-token int8 quantization, exact integer sums, then
    ``y = (float(sum) / a) * s_w`` in float32.
    """
    x = np.asarray(x, dtype=np.float32)
    if norm_weight is not None:
        x = rms_norm_f32(x, norm_weight, eps)
    q, a, _ = quantize_activations(x)
    sums = i2s_integer_sums(q, w_packed)
    s_w = np.float32(np.asarray(scale, dtype=np.float32).reshape(-1)[0])
    with np.errstate(invalid="ignore"):
        return (sums.astype(np.float32) / a[..., None]) * s_w
