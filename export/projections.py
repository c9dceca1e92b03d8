"""One function per ``--weights`` variant: how a linear projection becomes ONNX nodes.

Every variant gets the same inputs (a ``LinearWeights``) and returns the projection output
[..., N] float32, so layers.py never looks at the variant: ``projector(variant, bits)`` gives the
layer source its ``Projector``. A variant is a weight format (``bitnet_onnx.formats``): its record
holds every fact and the pack/unpack pair of the arrays stored here; this module holds only how
those arrays become nodes, one builder per record in ``BUILDERS`` (docs/contributing.md, "Add a
weight format").

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
from bitnet_onnx.formats import FORMATS, ProjectionWeight
from bitnet_onnx.ternary import ACT_EPS, BLOCK
from bitnet_onnx.export.builder import MS_DOMAIN, GraphBuilder
from bitnet_onnx.export.ops import quantize_per_token, rms_norm, rms_norm_as_op

NBITS_ACCURACY = 4  # int8 activations: ORT's fast MatMulNBits path


@dataclass(frozen=True)
class LinearWeights:
    weight: ProjectionWeight  # the checkpoint's weight, and whether it is stored ternary
    norm_in: np.ndarray | None  # BitNet per-projection RMSNorm weight [K], plain x/rms*w
    eps: float  # epsilon of norm_in

    def stored(self, variant: str, bits: int) -> dict[str, np.ndarray]:
        """The arrays the variant's format stores for this weight (bitnet_onnx.formats)."""
        return FORMATS[variant].stored(self.weight, bits)


def _norm_in(b: GraphBuilder, x: str, lw: LinearWeights) -> str:
    return x if lw.norm_in is None else rms_norm(b, x, lw.norm_in, lw.eps, name="norm_in")


def i2s(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    stored = lw.stored("i2s", bits)
    inputs = [x, b.initializer("W", stored["W"]), b.initializer("scale", stored["scale"])]
    if lw.norm_in is not None:
        inputs.append(b.initializer("norm_weight", lw.norm_in.astype(np.float32)))
    return b.op(OP_NAME, inputs, domain=OP_DOMAIN, epsilon=float(lw.eps), name="matmul")


def f32(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    stored = lw.stored("f32", bits)
    x = _norm_in(b, x, lw)
    return b.op("MatMul", [x, b.initializer("weight", stored["weight"])], name="matmul")


def f16(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    stored = lw.stored("f16", bits)
    x = _norm_in(b, x, lw)
    w16 = b.initializer("weight_f16", stored["weight_f16"])
    return b.op("MatMul", [x, b.op("Cast", [w16], to=TensorProto.FLOAT)], name="matmul")


def int8(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    stored = lw.stored("int8", bits)
    if lw.norm_in is not None:
        x = rms_norm_as_op(b, x, lw.norm_in, lw.eps)
    codes, a = quantize_per_token(b, x, ACT_EPS)
    # float((codes - 128) . W), exact int32 sums (scales 1), then (sum / a) * s_w in the op's order: bit-exact
    sums = b.op("MatMulIntegerToFloat", [codes, b.initializer("weight_int8", stored["weight_int8"]),
                                         b.const(1.0), b.const(1.0), b.const(128, np.uint8)], domain=MS_DOMAIN)
    y = b.op("Div", [sums, a], name="per_token_scale")
    return b.op("Mul", [y, b.initializer("scale", stored["scale"])], name="matmul")


def nbits(b: GraphBuilder, x: str, lw: LinearWeights, bits: int) -> str:
    stored = lw.stored("nbits", bits)
    x = _norm_in(b, x, lw)
    n, k = lw.weight.weight.shape
    return b.op("MatMulNBits", [x, b.initializer("B", stored["B"]), b.initializer("scales", stored["scales"])],
                domain=MS_DOMAIN, name="matmul", K=k, N=n, bits=bits, block_size=BLOCK,
                accuracy_level=NBITS_ACCURACY)


# weight format name -> its builder; every row has the signature (builder, x, weights, bits) -> output
BUILDERS = {"i2s": i2s, "f32": f32, "f16": f16, "int8": int8, "nbits": nbits}

Projector = Callable[[GraphBuilder, str, LinearWeights], str]


def projector(variant: str, bits: int = 4) -> Projector:
    """The projection strategy of ``--weights variant`` (``bits``: MatMulNBits width for nbits)."""
    return partial(BUILDERS[variant], bits=bits)
