"""Weight formats: one record per ``--weights`` value, and every fact of a format in its record.

A ``WeightFormat`` says whether the format exists only for ternary weights, which attention
strategy its exports use by default, which reference numerics it reproduces (verify), the oldest
onnxruntime that runs it, and how a projection's weight is stored: ``pack`` (weight -> the arrays
the projection stores, by initializer name) paired with ``unpack`` (those arrays -> the float32
weight [N, K] the projection multiplies by), as gguf-py's quants.py pairs each quantizer with its
dequantizer. For a ternary weight ``unpack(pack(w)) == s_w * T`` exactly (f16: s_w * T rounded to
float16 once), in every format; tests/test_formats.py checks each record.

How a format's arrays become ONNX nodes is the projection builder of the same name in
export/projections.py (a target: the core cannot hold it); a test checks that every record has one.
The export's manifest, the exporter's choices, verify and bench read everything else from here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.ternary import BLOCK, pack_i2s, ternarize, unpack_i2s

MIN_ONNXRUNTIME = "1.21"  # the dependency floor (pyproject: onnxruntime>=1.21): what every format runs on
NBITS_WIDTHS = (2, 4)  # MatMulNBits widths that hold a ternary value exactly
FLOAT16_MAX = float(np.finfo(np.float16).max)

Stored = dict[str, np.ndarray]  # initializer name -> array, as a projection stores its weight


def to_float16(values: np.ndarray, name: str, out: np.ndarray | None = None) -> np.ndarray:
    """``values`` as float16; an error naming the tensor when a value is beyond float16's range
    (it would become Inf, and the model's output NaN). ``out``: a contiguous float16 array of as many
    values to write them into (returned, shaped as ``values``), instead of a new one."""
    # the extremes, not max(abs): no temporary copy (a 262k-token embedding table: 0.1 s instead of 2 s)
    peak = max(float(np.max(values, initial=0.0)), -float(np.min(values, initial=0.0)))
    if peak > FLOAT16_MAX:
        raise BitnetOnnxError(f"tensor {name}: value {peak:g} is beyond float16's range (max {FLOAT16_MAX:g}), "
                              "which this output stores it in")
    if out is not None and (out.dtype != np.float16 or out.size != values.size or not out.flags.c_contiguous):
        raise ValueError(f"to_float16: out must be a contiguous float16 array of {values.size} values")
    out = np.empty(values.size, np.float16) if out is None else out.reshape(-1)  # a view of a contiguous out
    if values.dtype != np.float32 or values.size == 0:
        out[...] = values.reshape(-1)  # numpy's cast
        return out.reshape(values.shape)
    # into an array of ours: an output of run() would stay in ONNX Runtime's arena for the process's life
    # (the size of the largest tensor cast: 336 MB after a 168M-value table)
    flat = np.ascontiguousarray(values).reshape(-1)
    session = _float16_cast()
    binding = session.io_binding()
    binding.bind_cpu_input("x", flat)
    binding.bind_output("y", "cpu", 0, np.float16, [flat.size], out.ctypes.data)
    session.run_with_iobinding(binding)
    return out.reshape(values.shape)


# The ONNX model Cast(x: float[n]) -> y: float16[n] (opset 17, IR version 8), serialized: built with onnx's
# helper it would cost a process that has not loaded the onnx package (convert-gguf) its 0.8 s import;
# tests/test_formats.py builds it with the helper and compares the bytes.
FLOAT16_CAST_MODEL = bytes.fromhex(
    "08083a490a170a01781201792204436173742a090a02746f180aa00102120a746f5f666c6f617431365a100a0178120b0a09"
    "080112050a0312016e62100a0179120b0a09080a12050a0312016e42040a001011")


@functools.cache
def _float16_cast():
    """A session of FLOAT16_CAST_MODEL on ONNX Runtime: numpy's cast is a scalar loop (3.5-6 ns a value on a
    Zen 4 core: a real-size export's embedding table 0.5-0.6 s), MLAS's a vector one (F16C, NEON: 0.2 ns);
    the same IEEE round-to-nearest-even bits as numpy's (tests/test_formats.py compares the two at every
    float16 rounding boundary)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = False  # nothing to keep: to_float16 binds its own buffers
    return ort.InferenceSession(FLOAT16_CAST_MODEL, options, providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class ProjectionWeight:
    """A projection's weight as the checkpoint holds it, and whether it is stored ternary."""

    weight: np.ndarray  # float32 [N, K] as stored in the checkpoint
    ternary: bool  # BitNet numerics (trained BitNet, or --ternarize): stored as T, s_w = ternarize(weight)
    name: str = "projection"  # the checkpoint's tensor name, for errors
    codes: tuple[np.ndarray, float] | None = None  # ready I2_S (packed [N, K/4], s_w) of a GGUF: used as is

    def ternarized(self) -> tuple[np.ndarray, float]:
        if self.codes is not None:
            packed, s_w = self.codes
            return unpack_i2s(packed, self.weight.shape[1]), s_w
        return ternarize(self.weight)

    def i2s(self) -> tuple[np.ndarray, float]:
        """(I2_S bytes [N, K/4], s_w): the source's own bytes when it has them, no re-quantization."""
        if self.codes is not None:
            return self.codes
        t, s_w = self.ternarized()
        return pack_i2s(t), s_w

    def dense(self) -> np.ndarray:
        """float32 [N, K]: s_w * T for ternary weights, the weight itself otherwise."""
        if self.ternary:
            t, s_w = self.ternarized()
            return t.astype(np.float32) * np.float32(s_w)
        return self.weight


@dataclass(frozen=True)
class WeightFormat:
    name: str  # the --weights value and the manifest's "weights"
    ternary_only: bool  # exists only for ternary weights (a BitNet model, or --ternarize)
    default_attention: str  # the attention strategy of its exports (export/attention.py STRATEGIES)
    reference_activations: str  # the reference numerics it reproduces (reference.ACTIVATION_MODES)
    pack: Callable[[ProjectionWeight, int], Stored]  # (weight, bits) -> the arrays the projection stores
    unpack: Callable[[Stored, int], np.ndarray]  # (those arrays, bits) -> float32 [N, K]
    block: int | None = None  # K must be a multiple of it (packed layouts cut rows into blocks)
    bits: tuple[int, ...] = ()  # its --nbits choices (formats with a width)
    min_onnxruntime_by_bits: Mapping[int, str] = field(default_factory=dict)  # a width's ORT floor, if higher

    def min_onnxruntime(self, bits: int) -> str:
        return self.min_onnxruntime_by_bits.get(bits, MIN_ONNXRUNTIME) if self.bits else MIN_ONNXRUNTIME

    def stored(self, w: ProjectionWeight, bits: int) -> Stored:
        """``pack`` after the checks every format states by its record (ternary only, block width)."""
        if self.ternary_only and not w.ternary:
            raise BitnetOnnxError(f"--weights {self.name} needs a BitNet model (or --ternarize for a standard model)")
        k = w.weight.shape[1]
        if self.block and k % self.block:
            raise BitnetOnnxError(f"tensor {w.name}: input width {k} is not a multiple of {self.block}, "
                                  f"which --weights {self.name} needs; use --weights int8 or f32")
        return self.pack(w, bits)


def _pack_i2s(w: ProjectionWeight, bits: int) -> Stored:
    packed, s_w = w.i2s()
    return {"W": packed, "scale": np.array([s_w], np.float32)}


def _unpack_i2s(stored: Stored, bits: int) -> np.ndarray:
    return unpack_i2s(stored["W"]).astype(np.float32) * np.float32(stored["scale"][0])


def _pack_f32(w: ProjectionWeight, bits: int) -> Stored:
    return {"weight": np.ascontiguousarray(w.dense().T)}  # [K, N]: MatMul's B


def _unpack_f32(stored: Stored, bits: int) -> np.ndarray:
    return np.ascontiguousarray(stored["weight"].T, dtype=np.float32)


def _pack_f16(w: ProjectionWeight, bits: int) -> Stored:
    return {"weight_f16": to_float16(np.ascontiguousarray(w.dense().T), w.name)}


def _unpack_f16(stored: Stored, bits: int) -> np.ndarray:
    return np.ascontiguousarray(stored["weight_f16"].T.astype(np.float32))


def _pack_int8(w: ProjectionWeight, bits: int) -> Stored:
    """int8 [K, N] and its scale: T with s_w (ternary), else W quantized per output column (absmax)."""
    if w.ternary:
        t, s_w = w.ternarized()
        wq, scale = t.T, np.array(s_w, np.float32)
    else:
        col = np.maximum(np.abs(w.weight).max(axis=1), 1e-12).astype(np.float32) / np.float32(127.0)
        wq = np.clip(np.rint(w.weight / col[:, None]), -127, 127).astype(np.int8).T
        scale = col
    return {"weight_int8": np.ascontiguousarray(wq, dtype=np.int8), "scale": scale}


def _unpack_int8(stored: Stored, bits: int) -> np.ndarray:
    scale = np.asarray(stored["scale"], np.float32).reshape(-1, 1)  # s_w, or one per output row
    return stored["weight_int8"].T.astype(np.float32) * scale


def pack_nbits(t: np.ndarray, bits: int) -> np.ndarray:
    """MatMulNBits B input [N, K/block, block*bits/8] from ternary T [N, K] (zero point 2^(bits-1))."""
    n, k = t.shape
    per = 8 // bits
    codes = (t.astype(np.int16) + (1 << (bits - 1))).astype(np.uint8).reshape(n, k // per, per)
    packed = np.zeros((n, k // per), np.uint8)
    for i in range(per):  # element i of each byte group sits in bits [bits*i, bits*(i+1))
        packed |= (codes[:, :, i] << (bits * i)).astype(np.uint8)
    return packed.reshape(n, k // BLOCK, BLOCK * bits // 8)


def unpack_nbits(packed: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of :func:`pack_nbits`: B [N, K/block, block*bits/8] -> int8 T [N, K]."""
    n = packed.shape[0]
    per = 8 // bits
    flat = packed.reshape(n, -1)
    codes = np.stack([(flat >> (bits * i)) & ((1 << bits) - 1) for i in range(per)], axis=-1)
    return (codes.astype(np.int16) - (1 << (bits - 1))).astype(np.int8).reshape(n, -1)


def _pack_nbits(w: ProjectionWeight, bits: int) -> Stored:
    t, s_w = w.ternarized()
    n, k = t.shape
    return {"B": pack_nbits(t, bits), "scales": np.full(n * (k // BLOCK), s_w, np.float32)}


def _unpack_nbits(stored: Stored, bits: int) -> np.ndarray:
    t = unpack_nbits(stored["B"], bits)
    scales = stored["scales"].reshape(t.shape[0], -1)  # one per (row, block)
    return (t.reshape(t.shape[0], scales.shape[1], -1).astype(np.float32) * scales[:, :, None]).reshape(t.shape)


_RECORDS = (
    WeightFormat("i2s", ternary_only=True, default_attention="fused", reference_activations="int8",
                 pack=_pack_i2s, unpack=_unpack_i2s, block=BLOCK),
    WeightFormat("f32", ternary_only=False, default_attention="onnx", reference_activations="float",
                 pack=_pack_f32, unpack=_unpack_f32),
    WeightFormat("f16", ternary_only=False, default_attention="onnx", reference_activations="float",
                 pack=_pack_f16, unpack=_unpack_f16),
    WeightFormat("int8", ternary_only=False, default_attention="onnx", reference_activations="int8",
                 pack=_pack_int8, unpack=_unpack_int8),
    # MatMulNBits has a 2-bit CPU kernel from onnxruntime 1.24 on (1.21-1.23.2 checked)
    WeightFormat("nbits", ternary_only=True, default_attention="onnx", reference_activations="int8",
                 pack=_pack_nbits, unpack=_unpack_nbits, block=BLOCK, bits=NBITS_WIDTHS,
                 min_onnxruntime_by_bits=MappingProxyType({2: "1.24"})),
)
FORMATS: Mapping[str, WeightFormat] = MappingProxyType({f.name: f for f in _RECORDS})
NAMES = tuple(FORMATS)  # the --weights choices, in the order help and the table list them
# the format of an export without --weights: of ternary weights (BitNet, --ternarize), of float weights
DEFAULT_TERNARY, DEFAULT_FLOAT = "i2s", "f32"


def weight_format(name: str) -> WeightFormat:
    """The record of ``--weights name``; a one-line error naming the choices otherwise."""
    if name not in FORMATS:
        raise BitnetOnnxError(f"--weights {name!r} is not one of {', '.join(NAMES)}")
    return FORMATS[name]
