"""GGUF type 36 (I2_S): run-time registration with gguf-py, and the tensor record's bytes.

Upstream gguf-py has no I2_S, so ``register_i2s()`` adds it to gguf's in-memory tables (the enum
and GGML_QUANT_SIZES) without touching the installed package; GGUFWriter and GGUFReader then
handle type 36 like any other. The record is the one packer's bytes (``pack_i2s``), the f32
scale, and zeros up to N*K/4 + 32 bytes (DESIGN.md, "I2_S byte layout").
"""

from __future__ import annotations

import numpy as np

from bitnet_onnx.ternary import BLOCK, pack_i2s, ternarize, unpack_i2s

I2S_TYPE = 36  # GGMLQuantizationType id in bitnet.cpp
I2S_NAME = "I2_S"
I2S_FILE_TYPE = 40  # general.file_type of an I2_S model (LLAMA_FTYPE_MOSTLY_I2_S)
I2S_TAIL = 32  # bytes after the packed values; the first 4 hold the f32 scale
I2S_SIZES = (4, 1)  # (values, bytes) per "block" as bitnet.cpp's gguf-py declares it


def register_i2s():
    """Make gguf-py know type 36 as I2_S; returns the enum member. Idempotent."""
    import gguf

    qtype = gguf.GGMLQuantizationType
    try:
        member = qtype(I2S_TYPE)
    except ValueError:
        # IntEnum members cannot be added through the public API: build one the way the enum
        # machinery does and enter it in the lookup tables the writer and reader use.
        member = int.__new__(qtype, I2S_TYPE)
        member._name_, member._value_ = I2S_NAME, I2S_TYPE
        member.__objclass__ = qtype
        qtype._value2member_map_[I2S_TYPE] = member
        qtype._member_map_[I2S_NAME] = member
        qtype._member_names_.append(I2S_NAME)
        type.__setattr__(qtype, I2S_NAME, member)
    sizes = gguf.GGML_QUANT_SIZES.setdefault(member, I2S_SIZES)
    if member.name != I2S_NAME or sizes != I2S_SIZES:
        raise RuntimeError(f"the installed gguf package defines type {I2S_TYPE} as {member.name} {sizes}, "
                           f"not {I2S_NAME} {I2S_SIZES}")
    return member


def i2s_nbytes(n: int, k: int) -> int:
    return n * k // 4 + I2S_TAIL


def encode_i2s(w: np.ndarray) -> np.ndarray:
    """Absmean-ternarize W [N, K] and return the GGUF record: int8 [N*K/4 + 32].

    int8, not uint8: GGUFWriter would otherwise reinterpret the byte shape as a quant shape.
    """
    t, scale = ternarize(w)
    n, k = t.shape
    record = np.zeros(i2s_nbytes(n, k), dtype=np.uint8)
    record[: n * k // 4] = pack_i2s(t).reshape(-1)
    record[n * k // 4: n * k // 4 + 4] = np.array([scale], dtype="<f4").view(np.uint8)
    return record.view(np.int8)


def decode_i2s(record: np.ndarray, n: int, k: int) -> tuple[np.ndarray, float]:
    """GGUF record bytes (at least N*K/4 + 4) -> (T int8 [N, K], scale)."""
    raw = np.asarray(record).reshape(-1).view(np.uint8)
    body = n * k // 4
    if k % BLOCK or raw.size < body + 4:
        raise ValueError(f"an I2_S record of [{n}, {k}] needs K % {BLOCK} == 0 and {body + 4} bytes, got {raw.size}")
    t = unpack_i2s(raw[:body].reshape(n, k // 4), k)
    scale = float(raw[body: body + 4].view("<f4")[0])
    return t, scale


def read_i2s(reader, tensor) -> tuple[np.ndarray, float]:
    """Decode an I2_S tensor of a GGUFReader; the scale lies just past the reader's N*K/4 bytes."""
    k, n = (int(d) for d in tensor.shape)  # GGUF ne order: [K, N]
    start = int(tensor.data_offset)
    return decode_i2s(reader.data[start: start + n * k // 4 + 4], n, k)
