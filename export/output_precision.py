"""``export --output-precision``: the graph's sentence_embedding as int8 / uint8 / binary / ubinary, in
stock ONNX ops, so any ONNX Runtime host gets the stored bytes from the session itself.

The nodes compute bitnet_onnx.precision's definition (sentence-transformers' ``quantize_embeddings``)
in the same float32 order, with the calibration ranges baked in as constants:

- int8 / uint8: ``Clip(Floor((x - starts) / steps), 0, 255)`` (``- 128`` for int8), then a Cast of
  whole numbers;
- binary / ubinary: the sign bits ``x > 0`` as int32, zero-padded to a multiple of 8, weighted
  128, 64, ..., 1 per group of 8 and summed (numpy's ``packbits`` order); ``- 128`` for binary.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from bitnet_onnx.precision import FLOAT32, LEVELS, get_precision, level_scale
from bitnet_onnx.export.builder import GraphBuilder

_ELEM_TYPES = {"float32": TensorProto.FLOAT, "int8": TensorProto.INT8, "uint8": TensorProto.UINT8}
_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)


def add_output_precision(b: GraphBuilder, x: str, precision: str, ranges: np.ndarray | None,
                         width: int) -> tuple[str, int, list]:
    """(output name, element type, shape) of ``precision``'s values of ``x`` float32 [batch, width];
    ``ranges``: checked float32 [2, width] for int8 / uint8."""
    record = get_precision(precision, "--output-precision")
    if record.name == FLOAT32:
        return x, TensorProto.FLOAT, ["batch", width]
    with b.scope(f"output_{record.name}"):
        if record.needs_ranges:
            out = _levels(b, x, ranges, signed=record.dtype == "int8")
        else:
            out = _packed_signs(b, x, width, signed=record.dtype == "int8")
        out = b.op("Cast", [out], to=_ELEM_TYPES[record.dtype])
    return out, _ELEM_TYPES[record.dtype], ["batch", record.values(width)]


def _levels(b: GraphBuilder, x: str, ranges: np.ndarray, signed: bool) -> str:
    starts, steps = level_scale(ranges)
    scaled = b.op("Div", [b.op("Sub", [x, b.initializer("starts", starts)]), b.initializer("steps", steps)])
    levels = b.op("Clip", [b.op("Floor", [scaled]), b.const(0.0), b.const(float(LEVELS))])
    return b.op("Sub", [levels, b.const(128.0)]) if signed else levels


def _packed_signs(b: GraphBuilder, x: str, width: int, signed: bool) -> str:
    bits = b.op("Cast", [b.op("Greater", [x, b.const(0.0)])], to=TensorProto.INT32)
    padding = -width % 8
    if padding:
        bits = b.op("Pad", [bits, b.i64([0, 0, 0, padding])])
    groups = b.op("Reshape", [bits, b.i64([0, -1, 8])])
    packed = b.op("ReduceSum", [b.op("Mul", [groups, b.const(_BIT_WEIGHTS, np.int32)]), b.i64([-1])], keepdims=0)
    return b.op("Sub", [packed, b.const(128, np.int32)]) if signed else packed
