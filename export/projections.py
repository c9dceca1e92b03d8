"""One function per ``--weights`` variant: how a linear projection becomes ONNX nodes.

Every variant gets the same inputs (a ``LinearWeights``) and returns the projection output
[..., N] float32, so layers.py never looks at the variant: ``projector(variant, bits)`` gives the
layer source its ``Projector``. Adding a variant is one function plus a row in ``VARIANTS``.

What each variant computes, for a BitNet (ternary) projection with weight ``W`` and input norm ``g``
(``T, s_w = ternarize(W)``):

- ``i2s``   I2STernaryMatMul(x, pack_i2s(T), s_w, g): fused RMSNorm, per-token int8, exact sums.
- ``int8``  the same numbers with ORT-native ops: RMSNorm (float64 sum of squares, as the op), per-token
            int8 quantization (fed as q + 128, uint8: ORT's fast integer GEMMs are uint8 x int8),
            com.microsoft MatMulIntegerToFloat with T as int8 and zero point 128 (exact int32 sums), then
            ``(sum / a) * s_w``. No custom library needed. Timings: benchmarks/bench_int8_projection.py.
- ``nbits`` RMSNorm, then com.microsoft MatMulNBits holding T exactly (codes T + 2^(bits-1), block
            scale s_w), accuracy_level 4 (ORT's int8 activations, quantized per block, not per token).
- ``f32`` / ``f16``  fake-quant reference: RMSNorm, then MatMul with ``s_w * T`` (f16: stored f16, cast
            to f32 once); activations are NOT quantized.
For a standard model, f32/f16 use ``W`` itself and int8 quantizes W per output column (absmax) with
per-token int8 activations.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np
from onnx import TensorProto

from bitnet_onnx.customops import DOMAIN as OP_DOMAIN
from bitnet_onnx.customops.i2s_matmul import NAME as OP_NAME
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.ternary import ACT_EPS, pack_i2s, ternarize, unpack_i2s
from bitnet_onnx.weights import to_float16
from bitnet_onnx.export.builder import MS_DOMAIN, GraphBuilder
from bitnet_onnx.export.ops import quantize_per_token, rms_norm, rms_norm_as_op

NBITS_BLOCK = 128  # K % 128 == 0 for every projection (docs/architecture.md)
NBITS_ACCURACY = 4  # int8 activations: ORT's fast MatMulNBits path


@dataclass(frozen=True)
class LinearWeights:
    weight: np.ndarray  # float32 [N, K] as stored in the checkpoint
    norm_in: np.ndarray | None  # BitNet per-projection RMSNorm weight [K], plain x/rms*w
    ternary: bool  # BitNet numerics (trained BitNet, or --ternarize)
    eps: float  # epsilon of norm_in
    name: str = "projection"  # the checkpoint's tensor name, for errors
    codes: tuple[np.ndarray, float] | None = None  # ready I2_S (packed [N, K/4], s_w) of a GGUF: used as is

    def ternarized(self) -> tuple[np.ndarray, float]:
        if self.codes is not None:
            packed, s_w = self.codes
            return unpack_i2s(packed, self.weight.shape[1]), s_w
        return ternarize(self.weight)

    def packed(self) -> tuple[np.ndarray, float]:
        """(I2_S bytes [N, K/4], s_w): the source's own bytes when it has them, no re-quantization."""
        if self.codes is not None:
            return self.codes
        t, s_w = self.ternarized()
        return pack_i2s(t), s_w

    def need_blocks(self, variant: str) -> None:
        """Packed ternary layouts (I2_S, MatMulNBits) cut rows into 128-value blocks."""
        k = self.weight.shape[1]
        if k % NBITS_BLOCK:
            raise BitnetOnnxError(f"tensor {self.name}: input width {k} is not a multiple of {NBITS_BLOCK}, "
                                  f"which --weights {variant} needs; use --weights int8 or f32")


def _norm_in(b: GraphBuilder, x: str, lw: LinearWeights) -> str:
    return x if lw.norm_in is None else rms_norm(b, x, lw.norm_in, lw.eps, name="norm_in")


def i2s(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    if not lw.ternary:
        raise BitnetOnnxError("--weights i2s needs a BitNet model (or --ternarize for a standard model)")
    lw.need_blocks("i2s")
    packed, s_w = lw.packed()
    inputs = [x, b.initializer("W", packed), b.initializer("scale", np.array([s_w], np.float32))]
    if lw.norm_in is not None:
        inputs.append(b.initializer("norm_weight", lw.norm_in.astype(np.float32)))
    return b.op(OP_NAME, inputs, domain=OP_DOMAIN, epsilon=float(lw.eps), name="matmul")


def _dense_weight(lw: LinearWeights) -> np.ndarray:
    """[K, N] float32: s_w * T for ternary projections, W otherwise."""
    if lw.ternary:
        t, s_w = lw.ternarized()
        return (t.astype(np.float32) * np.float32(s_w)).T
    return lw.weight.T


def f32(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    x = _norm_in(b, x, lw)
    return b.op("MatMul", [x, b.initializer("weight", np.ascontiguousarray(_dense_weight(lw)))], name="matmul")


def f16(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    x = _norm_in(b, x, lw)
    w16 = b.initializer("weight_f16", to_float16(np.ascontiguousarray(_dense_weight(lw)), lw.name))
    return b.op("MatMul", [x, b.op("Cast", [w16], to=TensorProto.FLOAT)], name="matmul")


def int8(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    if lw.norm_in is not None:
        x = rms_norm_as_op(b, x, lw.norm_in, lw.eps)
    if lw.ternary:
        t, s_w = lw.ternarized()
        wq, scale = t.T, np.array(s_w, np.float32)
    else:  # per output column absmax
        col = np.maximum(np.abs(lw.weight).max(axis=1), 1e-12).astype(np.float32) / np.float32(127.0)
        wq = np.clip(np.rint(lw.weight / col[:, None]), -127, 127).astype(np.int8).T
        scale = col
    codes, a = quantize_per_token(b, x, ACT_EPS)
    # float((codes - 128) . W), exact int32 sums (scales 1), then (sum / a) * s_w in the op's order: bit-exact
    sums = b.op("MatMulIntegerToFloat", [codes, b.initializer("weight_int8", np.ascontiguousarray(wq, dtype=np.int8)),
                                         b.const(1.0), b.const(1.0), b.const(128, np.uint8)], domain=MS_DOMAIN)
    y = b.op("Div", [sums, a], name="per_token_scale")
    return b.op("Mul", [y, b.initializer("scale", scale)], name="matmul")


def pack_nbits(t: np.ndarray, bits: int) -> np.ndarray:
    """MatMulNBits B input [N, K/block, block*bits/8] from ternary T [N, K] (zero point 2^(bits-1))."""
    n, k = t.shape
    per = 8 // bits
    codes = (t.astype(np.int16) + (1 << (bits - 1))).astype(np.uint8).reshape(n, k // per, per)
    packed = np.zeros((n, k // per), np.uint8)
    for i in range(per):  # element i of each byte group sits in bits [bits*i, bits*(i+1))
        packed |= (codes[:, :, i] << (bits * i)).astype(np.uint8)
    return packed.reshape(n, k // NBITS_BLOCK, NBITS_BLOCK * bits // 8)


def nbits(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    if not lw.ternary:
        raise BitnetOnnxError("--weights nbits needs a BitNet model (or --ternarize for a standard model)")
    lw.need_blocks("nbits")
    x = _norm_in(b, x, lw)
    t, s_w = lw.ternarized()
    n, k = t.shape
    scales = np.full(n * (k // NBITS_BLOCK), s_w, np.float32)
    return b.op("MatMulNBits", [x, b.initializer("B", pack_nbits(t, bits)), b.initializer("scales", scales)],
                domain=MS_DOMAIN, name="matmul", K=k, N=n, bits=bits, block_size=NBITS_BLOCK,
                accuracy_level=NBITS_ACCURACY)


# --weights name -> strategy; every row has the signature (builder, x, weights, bits) -> output
VARIANTS = {"i2s": i2s, "f32": f32, "f16": f16, "int8": int8, "nbits": nbits}

Projector = Callable[[GraphBuilder, str, LinearWeights], str]


def projector(variant: str, bits: int = 4) -> Projector:
    """The projection strategy of ``--weights variant`` (``bits``: MatMulNBits width for nbits)."""
    return partial(VARIANTS[variant], bits=bits)
