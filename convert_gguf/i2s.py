"""Writing GGUF type 36 (I2_S): the tensor record's bytes.

The record is the one packer's bytes (``pack_i2s``), the f32 scale, and zeros up to N*K/4 + 32
bytes (docs/architecture.md, "I2_S byte layout"). Registration with gguf-py and reading live in the core
(``bitnet_onnx.gguf_file``), which the exporter's GGUF source shares.
"""

from __future__ import annotations

import numpy as np

from bitnet_onnx.gguf_file import (  # noqa: F401  (re-exported: the converter's I2_S names)
    I2S_FILE_TYPE, I2S_NAME, I2S_SIZES, I2S_TAIL, I2S_TYPE, decode_i2s, i2s_nbytes, read_i2s, register_i2s,
)
from bitnet_onnx.ternary import pack_i2s, ternarize


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
