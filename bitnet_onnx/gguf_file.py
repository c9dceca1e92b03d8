"""Reading GGUF files: the reader with I2_S (type 36) known, metadata values, tensor data; and the
I2_S record both ways (``encode_i2s`` / ``decode_i2s``, paired as gguf-py pairs each quant's two).

Shared by the GGUF converter (its ``inspect`` verb) and the GGUF model source the exporter reads.
Upstream gguf-py has no I2_S, so ``register_i2s()`` adds it to gguf's in-memory tables (the enum
and GGML_QUANT_SIZES) without touching the installed package; GGUFWriter and GGUFReader then
handle type 36 like any other. An I2_S record is the packed ternary codes (``ternary.pack_i2s``
layout, N*K/4 bytes), the f32 scale, and zeros up to N*K/4 + 32 bytes. Every other type is
dequantized by gguf-py's own ``gguf.quants.dequantize`` (F32, F16, BF16, Q8_0, Q4_K, Q6_K, ...).
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
from pathlib import Path

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import check_input_file, open_input_file
from bitnet_onnx.ternary import BLOCK, pack_i2s, ternarize, unpack_i2s

GGUF_MAGIC = b"GGUF"
I2S_TYPE = 36  # GGMLQuantizationType id in bitnet.cpp
I2S_NAME = "I2_S"
I2S_FILE_TYPE = 40  # general.file_type of an I2_S model (LLAMA_FTYPE_MOSTLY_I2_S)
I2S_TAIL = 32  # bytes after the packed values; the first 4 hold the f32 scale
I2S_SIZES = (4, 1)  # (values, bytes) per "block" as bitnet.cpp's gguf-py declares it
# gguf.PoolingType value -> our pooling name (0 NONE and 4 RANK have none)
POOLING_NAMES = {1: "mean", 2: "cls", 3: "lasttoken"}
# Sentence-transformers facts llama.cpp has no key for: convert-gguf writes them, the GGUF source reads them.
NORMALIZE_KEY = "bitnet_onnx.normalize"  # bool: L2-normalize the sentence embedding
PROMPT_NAMES_KEY = "bitnet_onnx.prompt_names"  # [str], parallel to PROMPTS_KEY
PROMPTS_KEY = "bitnet_onnx.prompts"  # [str]
DEFAULT_PROMPT_KEY = "bitnet_onnx.default_prompt_name"  # str
MAX_SEQ_LENGTH_KEY = "bitnet_onnx.max_seq_length"  # uint32
INCLUDE_PROMPT_KEY = "bitnet_onnx.include_prompt"  # bool: mean pooling includes the prompt's tokens


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


def is_gguf(path: str | Path) -> bool:
    """A file whose name ends in .gguf or that starts with the GGUF magic."""
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        return True
    if not path.is_file():
        return False
    with open_input_file(path) as f:
        return f.read(4) == GGUF_MAGIC


# GGUF value type -> bytes of one value (8 string, 9 array: variable)
_VALUE_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# GGUF value type -> struct format: uint8, int8, uint16, int16, uint32, int32, float32, bool, uint64, int64, float64
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_MAX_DIMS = 4  # GGML_MAX_DIMS
_UINT32 = 4
_DEFAULT_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT


class _Header:
    """A bounds-checked walk over a GGUF header: every count is checked against the bytes left before
    anything is read or allocated, so a crafted count fails at once instead of exhausting memory."""

    def __init__(self, data: bytes, path: Path):
        self.data, self.path, self.pos = data, path, 0
        self.order = "<"
        self.scalars: dict = {}  # metadata key -> value, for the keys that are not arrays

    def fail(self, what: str) -> BitnetOnnxError:
        return BitnetOnnxError(f"{self.path}: not a readable GGUF file ({what} at byte {self.pos}, "
                               f"file size {len(self.data)})")

    def unpack(self, fmt: str, what: str) -> tuple:
        size = struct.calcsize(self.order + fmt)
        if self.pos + size > len(self.data):
            raise self.fail(f"{what} beyond the end of the file")
        values = struct.unpack_from(self.order + fmt, self.data, self.pos)
        self.pos += size
        return values

    def count(self, what: str, min_item_bytes: int) -> int:
        (n,) = self.unpack("Q", what)
        left = len(self.data) - self.pos
        if n * min_item_bytes > left:
            raise self.fail(f"{what} declares {n} items, more than the {left} bytes left can hold")
        return n

    def skip_string(self, what: str) -> str:
        n = self.count(what, 1)
        start, self.pos = self.pos, self.pos + n
        try:  # GGUF strings are UTF-8; gguf-py decodes them strictly when read
            return str(self.data[start:self.pos], "utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{what}: not UTF-8 ({e.reason})") from None

    def skip_value(self, kind: int, what: str, depth: int = 0):
        """Steps over one value; returns it when it is a number, bool or string (None for an array)."""
        if kind in _VALUE_SIZES:
            return self.unpack(_SCALAR_FORMATS[kind], what)[0]
        elif kind == _STRING:
            return self.skip_string(what)
        elif kind == _ARRAY and depth < 2:
            (item,) = self.unpack("I", f"{what}: array type")
            if item in _VALUE_SIZES:
                n = self.count(f"{what}: array", _VALUE_SIZES[item])
                self.pos += n * _VALUE_SIZES[item]
            elif item in (_STRING, _ARRAY):
                for _ in range(self.count(f"{what}: array", 8)):
                    self.skip_value(item, what, depth + 1)
            else:
                raise self.fail(f"{what}: unknown array item type {item}")
        else:
            raise self.fail(f"{what}: unknown value type {kind}")

    def walk(self) -> None:
        magic = self.unpack("4s", "magic")[0]
        if magic != GGUF_MAGIC:
            raise self.fail(f"magic {magic!r} is not {GGUF_MAGIC!r}")
        (version,) = self.unpack("I", "version")
        if version & 0xFFFF == 0:  # written on a big-endian machine
            self.order = ">"
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in (2, 3):
            raise self.fail(f"version {version} (supported: 2, 3)")
        (n_tensors,) = self.unpack("Q", "tensor count")
        n_keys = self.count("metadata key count", 8 + 4 + 1)
        if n_tensors * (8 + 4 + 4 + 8) > len(self.data) - self.pos:
            raise self.fail(f"tensor count {n_tensors} is more than the file can hold")
        alignment = _DEFAULT_ALIGNMENT
        for i in range(n_keys):
            key = self.skip_string(f"metadata key {i}")
            (kind,) = self.unpack("I", f"metadata {key!r}: type")
            if key == "general.alignment" and kind == _UINT32:
                (alignment,) = self.unpack("I", "general.alignment")
                if alignment == 0 or alignment & (alignment - 1):
                    raise self.fail(f"general.alignment {alignment} is not a power of two")
            else:
                value = self.skip_value(kind, f"metadata {key!r}")
                if value is not None:
                    self.scalars[key] = value
        tensors = []
        for i in range(n_tensors):
            name = self.skip_string(f"tensor {i}: name")
            (n_dims,) = self.unpack("I", f"tensor {name!r}: dimension count")
            if n_dims > _MAX_DIMS:
                raise self.fail(f"tensor {name!r}: {n_dims} dimensions (at most {_MAX_DIMS})")
            *dims, kind, offset = self.unpack(f"{n_dims}QIQ", f"tensor {name!r}: shape, type and offset")
            tensors.append((name, dims, kind, offset))
        data_start = -(-self.pos // alignment) * alignment
        for name, dims, kind, offset in tensors:
            end = data_start + offset + self.tensor_bytes(name, dims, kind)
            if end > len(self.data):
                raise self.fail(f"tensor {name!r}: data ends at byte {end}, beyond the end of the file")

    def tensor_bytes(self, name: str, dims: list[int], kind: int) -> int:
        """Bytes of a tensor's data (ne order dims); an error for an unknown type or a shape it cannot hold."""
        import gguf

        register_i2s()
        if 0 in dims:  # no model tensor is empty, and numpy cannot shape one whose other dimensions overflow
            raise self.fail(f"tensor {name!r}: shape {list(reversed(dims))} has a dimension of 0")
        count = 1
        for d in dims:
            count *= d
        k = dims[0] if dims else 1
        if kind == I2S_TYPE:
            if k % BLOCK:
                raise self.fail(f"tensor {name!r}: I2_S needs K % {BLOCK} == 0, got K={k}")
            return count // 4 + 4  # what read_i2s reads: the codes and the f32 scale (the tail's rest may be cut)
        try:
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise self.fail(f"tensor {name!r}: unknown tensor type {kind}") from None
        if k % block:
            raise self.fail(f"tensor {name!r}: {k} values per row is not a multiple of its type's block of {block}")
        return count // block * size


def check_gguf_header(path: str | Path) -> dict:
    """A one-line error for a GGUF header whose counts or lengths do not fit in the file (before
    gguf.GGUFReader, which would allocate what a crafted count asks); returns the metadata keys that
    are not arrays (0.25 s over a 262k vocabulary, where open_gguf's reader takes 0.45 s to parse it all)."""
    path = Path(path)
    check_input_file(path)
    with open_input_file(path) as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise BitnetOnnxError(f"{path}: not a readable GGUF file (empty)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            header = _Header(data, path)
            header.walk()
            return header.scalars


@functools.cache
def _plain_view_reader():
    """gguf.GGUFReader over a plain ndarray view of its file map instead of the np.memmap it opens.

    The reader slices its map twice or more per metadata value; each slice of an np.memmap runs memmap's
    Python bookkeeping (__getitem__, __array_finalize__), which over a 262k-token vocabulary was most of its
    time (a real Gemma3 GGUF: 7.8 s -> 2.6 s on a Sapphire Rapids core). A plain view of the same pages
    (np.asarray keeps the map alive through its base) slices in C; the parsing is gguf-py's."""
    import gguf

    class PlainViewGGUFReader(gguf.GGUFReader):
        @property
        def data(self):
            return self._data

        @data.setter
        def data(self, value):
            self._data = np.asarray(value)

    return PlainViewGGUFReader


@functools.cache
def _plain_array_reader():
    """``_plain_view_reader`` with its metadata arrays parsed whole: gguf-py parses an array one element at
    a time through its general field parser (an enum, lists and three dtype views per element);
    ``_array_parts`` reads a little-endian file's array of strings or numbers in one pass and gives the same
    parts, element for element (tests/test_gguf.py compares every part with gguf-py's): the real Gemma3
    GGUF 3.0-3.3 s -> 0.45 s on a Zen 4 core. Arrays of arrays and byte-swapped files take gguf-py's path."""
    import gguf

    string, array = int(gguf.GGUFValueType.STRING), int(gguf.GGUFValueType.ARRAY)
    numbers = {int(kind): np.dtype(dtype) for kind, dtype in gguf.GGUFReader.gguf_scalar_to_np.items()}
    string_length = struct.Struct("<Q").unpack_from

    class PlainArrayGGUFReader(_plain_view_reader()):
        def _get_field_parts(self, orig_offs: int, raw_type: int):
            item = int(self.data[orig_offs:orig_offs + 4].view(np.uint32)[0]) if int(raw_type) == array else None
            if self.byte_order != "I" or (item != string and item not in numbers):
                return super()._get_field_parts(orig_offs, raw_type)
            return self._array_parts(orig_offs, item)

        def _array_parts(self, orig_offs: int, item: int):
            """gguf-py's (size, parts, data indices, types) of the array at ``orig_offs``: its item type and
            length, then each element's parts (a string's length and bytes; a number's one-element view)."""
            data = self.data
            parts = [data[orig_offs:orig_offs + 4].view(np.uint32), data[orig_offs + 4:orig_offs + 12].view(np.uint64)]
            count, offs = int(parts[1][0]), orig_offs + 12
            if item == string:
                for _ in range(count):
                    if offs + 8 > len(data):
                        raise ValueError(f"string array at offset {orig_offs} runs past the end of the file")
                    length = string_length(data, offs)[0]
                    parts += (data[offs:offs + 8].view(np.uint64), data[offs + 8:offs + 8 + length])
                    offs += 8 + length
                if offs > len(data):
                    raise ValueError(f"string array at offset {orig_offs} runs past the end of the file")
                indices = list(range(3, 3 + 2 * count, 2))
            else:
                end = offs + numbers[item].itemsize * count
                if end > len(data):
                    raise ValueError(f"array at offset {orig_offs} runs past the end of the file")
                values = data[offs:end].view(numbers[item])
                parts += (values[i:i + 1] for i in range(count))
                offs, indices = end, list(range(2, 2 + count))
            return offs - orig_offs, parts, indices, [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType(item)]

    return PlainArrayGGUFReader


def open_gguf(path: str | Path, checked: bool = False):
    """A GGUFReader that knows I2_S; a one-line error for anything that is not a readable GGUF.
    ``checked``: the caller has had ``check_gguf_header`` pass already."""
    register_i2s()
    path = Path(path)
    if not checked:
        check_gguf_header(path)
    try:
        return _plain_array_reader()(path)
    except (ValueError, IndexError, KeyError, OSError, TypeError) as e:
        raise BitnetOnnxError(f"{path}: not a readable GGUF file ({e})") from None


def field_value(field):
    """A metadata value as Python data (str, number, bool or list)."""
    value = field.contents()
    return value.tolist() if isinstance(value, np.ndarray) else value


def metadata(reader) -> dict:
    """Every metadata key (the reader's own GGUF.* header entries left out) -> Python value."""
    return {name: field_value(f) for name, f in reader.fields.items() if not name.startswith("GGUF.")}


def tensor_nbytes(tensor) -> int:
    """Bytes the tensor occupies in the file (I2_S adds its 32-byte scale tail)."""
    if int(tensor.tensor_type) == I2S_TYPE:
        return i2s_nbytes(int(tensor.shape[1]), int(tensor.shape[0]))
    return int(tensor.n_bytes)


def tensor_shape(tensor) -> tuple[int, ...]:
    """numpy shape of a tensor: GGUF's ne order reversed ([N, K] for a projection)."""
    return tuple(int(d) for d in reversed(tensor.shape))


def encode_i2s(w: np.ndarray) -> np.ndarray:
    """Absmean-ternarize W [N, K] and return the GGUF record: int8 [N*K/4 + 32], the inverse of
    ``decode_i2s`` up to the ternarization.

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
    packed, scale = split_i2s(record, n, k)
    return unpack_i2s(packed, k), scale


def split_i2s(record: np.ndarray, n: int, k: int) -> tuple[np.ndarray, float]:
    """GGUF record bytes -> (packed codes uint8 [N, K/4] as stored, scale): no unpacking."""
    raw = np.asarray(record).reshape(-1).view(np.uint8)
    body = n * k // 4
    if k % BLOCK or raw.size < body + 4:
        raise ValueError(f"an I2_S record of [{n}, {k}] needs K % {BLOCK} == 0 and {body + 4} bytes, got {raw.size}")
    scale = float(raw[body: body + 4].view("<f4")[0])
    return raw[:body].reshape(n, k // 4), scale


def _i2s_record(reader, tensor) -> tuple[np.ndarray, int, int]:
    k, n = (int(d) for d in tensor.shape)  # GGUF ne order: [K, N]
    start = int(tensor.data_offset)
    return reader.data[start: start + n * k // 4 + 4], n, k


def read_i2s(reader, tensor) -> tuple[np.ndarray, float]:
    """Decode an I2_S tensor of a GGUFReader; the scale lies just past the reader's N*K/4 bytes."""
    return decode_i2s(*_i2s_record(reader, tensor))


def read_i2s_packed(reader, tensor) -> tuple[np.ndarray, float]:
    """An I2_S tensor's packed codes [N, K/4] (a view of the file) and scale."""
    return split_i2s(*_i2s_record(reader, tensor))


def dequantize(reader, tensor) -> np.ndarray:
    """Any tensor as float32 in numpy shape: I2_S as scale * T, the rest by gguf-py's dequantize."""
    import gguf

    if int(tensor.tensor_type) == I2S_TYPE:
        t, scale = read_i2s(reader, tensor)
        return t.astype(np.float32) * np.float32(scale)
    try:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise ValueError(f"type {tensor.tensor_type.name} cannot be dequantized by gguf-py") from None
    return np.asarray(data, dtype=np.float32).reshape(tensor_shape(tensor))
