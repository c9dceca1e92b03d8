"""Graph fragments shared by layers, projections and pooling: RMSNorm, activations, per-token int8.

Plain ONNX ops only; ORT's optimizer (level ALL) fuses the RMSNorm pattern into its
SimplifiedLayerNormalization kernel, so the file stays portable across ORT versions.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from bitnet_onnx.arch import ACTIVATIONS
from bitnet_onnx.export.builder import GraphBuilder


def rms_norm(b: GraphBuilder, x: str, weight: np.ndarray | None, eps: float, name: str = "norm") -> str:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis (weight already holds any +1 offset)."""
    with b.scope(name):
        sq = b.op("Pow", [x, b.const(2.0)])
        ms = b.op("ReduceMean", [sq, b.i64([-1])], keepdims=1)
        rms = b.op("Sqrt", [b.op("Add", [ms, b.const(eps)])])
        y = b.op("Div", [x, rms])
        if weight is None:
            return y
        return b.op("Mul", [y, b.initializer("weight", np.asarray(weight, dtype=np.float32))])


def rms_norm_as_op(b: GraphBuilder, x: str, weight: np.ndarray, eps: float, name: str = "norm_in") -> str:
    """RMSNorm exactly as I2STernaryMatMul fuses it (ternary.rms_norm_f32): mean of squares in float64,
    ``x * float32(1 / sqrt(ms + eps)) * w`` in float32, so int8 activations match the op bit for bit."""
    with b.scope(name):
        xd = b.op("Cast", [x], to=TensorProto.DOUBLE)
        ms = b.op("ReduceMean", [b.op("Mul", [xd, xd]), b.i64([-1])], keepdims=1)
        inv = b.op("Div", [b.const(1.0, np.float64), b.op("Sqrt", [b.op("Add", [ms, b.const(eps, np.float64)])])])
        y = b.op("Mul", [x, b.op("Cast", [inv], to=TensorProto.FLOAT)])
        return b.op("Mul", [y, b.initializer("weight", np.asarray(weight, dtype=np.float32))])


# arch.ACTIVATIONS short name -> its nodes
_ACTIVATION_NODES = {
    "silu": lambda b, x: b.op("Mul", [x, b.op("Sigmoid", [x])], name="silu"),
    "gelu_tanh": lambda b, x: b.op("Gelu", [x], approximate="tanh"),
    "gelu": lambda b, x: b.op("Gelu", [x]),
    "tanh": lambda b, x: b.op("Tanh", [x]),
    "relu": lambda b, x: b.op("Relu", [x]),
    "sigmoid": lambda b, x: b.op("Sigmoid", [x]),
    "identity": lambda b, x: x,
}
assert set(_ACTIVATION_NODES) == set(ACTIVATIONS), "every activation of arch.ACTIVATIONS needs its nodes"


def activation(b: GraphBuilder, x: str, kind: str) -> str:
    """The MLP / Dense activations by short name (arch.ACTIVATIONS)."""
    if kind not in _ACTIVATION_NODES:
        raise ValueError(f"unknown activation {kind!r}")
    return _ACTIVATION_NODES[kind](b, x)


def quantize_per_token(b: GraphBuilder, x: str, act_eps: float) -> tuple[str, str]:
    """Per-token absmax int8 (docs/architecture.md, numerics): ``a = 127 / max(max|x|, eps)``, ``q = clamp(rint(x*a))``.

    Returns ``(q + 128 as uint8 [..., K], a float32 [..., 1])``: ORT's fast integer GEMMs take unsigned
    activations with a zero point (int8 x int8 MatMulInteger: 8-12x slower, bench_int8_projection.py). ONNX Round is
    half-to-even, like the op.
    """
    with b.scope("quant"):
        absmax = b.op("ReduceMax", [b.op("Abs", [x]), b.i64([-1])], keepdims=1)
        a = b.op("Div", [b.const(127.0), b.op("Max", [absmax, b.const(act_eps)])])
        r = b.op("Round", [b.op("Mul", [x, a])])
        q = b.op("Clip", [r, b.const(-128.0), b.const(127.0)])
        return b.op("Cast", [b.op("Add", [q, b.const(128.0)])], to=TensorProto.UINT8, name="codes"), a
