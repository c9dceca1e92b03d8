"""safetensors files: an index of where each tensor's bytes are, and one tensor at a time as float32
(whole, or in bounded chunks for a conversion that need not hold it whole).

Used by the HF-folder model source (weights.py) and by sentence-transformers' Dense modules
(st_modules.py). safetensors' numpy framework cannot return bf16, so the data is memory-mapped by
offset; the safetensors library still checks the header and that the file is not truncated.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import check_input_file, open_input_file

# safetensors dtype -> (numpy storage dtype, is bfloat16)
DTYPES = {"F32": (np.float32, False), "F16": (np.float16, False), "BF16": (np.uint16, True)}


@dataclass(frozen=True)
class TensorEntry:
    file: Path
    dtype: str  # safetensors dtype string, e.g. "BF16"
    shape: tuple[int, ...]
    offset: int  # absolute byte offset of the data in the file


def index_safetensors(file: Path) -> dict[str, TensorEntry]:
    """Name -> location of every tensor in one safetensors file, validated with the safetensors library."""
    from safetensors import SafetensorError, safe_open

    check_input_file(file)  # before safe_open: a FIFO would block it, a device never end
    try:
        with safe_open(str(file), framework="np") as f:
            names = set(f.keys())
    except FileNotFoundError:
        raise BitnetOnnxError(f"{file}: file not found") from None
    except (SafetensorError, ValueError) as e:
        raise BitnetOnnxError(f"{file}: not a valid safetensors file ({e})") from None
    except OSError as e:
        raise BitnetOnnxError(f"{file}: cannot be read ({e.strerror or e})") from None
    with open_input_file(file) as fh:
        (header_len,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(header_len))
    base = 8 + header_len
    entries = {}
    for name in names:
        h = header[name]
        start, _ = h["data_offsets"]
        entries[name] = TensorEntry(file, h["dtype"], tuple(int(d) for d in h["shape"]), base + int(start))
    return entries


# Elements per chunk of entry_chunks: a 4 MB float32 buffer, reused, where a whole 262k-token bf16
# table widened at once is 670 MB (and, freshly allocated, most of the table's conversion time).
CHUNK_ELEMENTS = 1 << 20


def _mapped(entry: TensorEntry, name: str) -> tuple[np.ndarray | None, bool]:
    """(the stored values memory-mapped, None when the tensor is empty; whether they are bf16 bits)."""
    if entry.dtype not in DTYPES:
        raise BitnetOnnxError(f"{entry.file.name}: tensor {name} has dtype {entry.dtype}; "
                              f"supported: {', '.join(DTYPES)}")
    storage, is_bf16 = DTYPES[entry.dtype]
    if int(np.prod(entry.shape, dtype=np.int64)) == 0:
        return None, is_bf16
    return np.memmap(entry.file, dtype=storage, mode="r", offset=entry.offset, shape=entry.shape), is_bf16


def load_entry(entry: TensorEntry, name: str) -> np.ndarray:
    """One tensor as float32 (bf16 widened by a 16-bit shift); the source is memory-mapped."""
    raw, is_bf16 = _mapped(entry, name)
    if raw is None:
        return np.zeros(entry.shape, dtype=np.float32)
    if is_bf16:  # widen in place: one f32-sized buffer, never two
        wide = raw.astype(np.uint32)
        wide <<= 16
        return wide.view(np.float32)
    return np.array(raw, dtype=np.float32)


def entry_chunks(entry: TensorEntry, name: str, elements: int = CHUNK_ELEMENTS) -> Iterator[tuple[int, np.ndarray]]:
    """The tensor as float32 in flat order, ``elements`` at a time: (flat offset, values). A chunk's array
    is reused for the next one, so a caller converts or copies it before asking for more."""
    raw, is_bf16 = _mapped(entry, name)
    if raw is None:
        return
    flat = raw.reshape(-1)
    buffer = np.empty(min(elements, flat.size), np.uint32 if is_bf16 else np.float32)
    for start in range(0, flat.size, buffer.size):
        chunk = buffer[:min(buffer.size, flat.size - start)]
        chunk[...] = flat[start:start + chunk.size]
        if is_bf16:
            chunk <<= 16
        yield start, chunk.view(np.float32)
