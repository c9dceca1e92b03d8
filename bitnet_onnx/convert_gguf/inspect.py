"""A GGUF file's metadata and tensor table, I2_S included (the `inspect` verb prints it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError

from bitnet_onnx.convert_gguf.i2s import I2S_TYPE, i2s_nbytes, read_i2s, register_i2s

ARRAY_PREVIEW = 6  # array elements printed unless --all


def open_gguf(path: str | Path):
    """A GGUFReader that knows I2_S; a one-line error for anything that is not a readable GGUF."""
    import gguf

    register_i2s()
    path = Path(path)
    if not path.is_file():
        raise BitnetOnnxError(f"{path}: no such file")
    try:
        return gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, OSError, TypeError) as e:
        raise BitnetOnnxError(f"{path}: not a readable GGUF file ({e})") from None


def field_value(field):
    """A metadata value as Python data (str, number, bool or list)."""
    value = field.contents()
    return value.tolist() if isinstance(value, np.ndarray) else value


def tensor_nbytes(tensor) -> int:
    """Bytes the tensor occupies in the file (I2_S adds its 32-byte scale tail)."""
    if int(tensor.tensor_type) == I2S_TYPE:
        return i2s_nbytes(int(tensor.shape[1]), int(tensor.shape[0]))
    return int(tensor.n_bytes)


def _format(value, full: bool) -> str:
    if isinstance(value, list):
        shown = value if full or len(value) <= ARRAY_PREVIEW else value[:ARRAY_PREVIEW]
        more = "" if len(shown) == len(value) else f", ... ({len(value)} items)"
        return "[" + ", ".join(repr(v) for v in shown) + more + "]"
    return repr(value)


def describe(path: str | Path, full: bool = False) -> str:
    reader = open_gguf(path)
    lines = [f"{path}: GGUF, {len(reader.fields)} metadata keys, {len(reader.tensors)} tensors", "", "metadata:"]
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        lines.append(f"  {name} = {_format(field_value(field), full)}")
    rows = [("name", "type", "shape (ne)", "bytes", "i2_s scale")]
    total = 0
    for t in reader.tensors:
        nbytes = tensor_nbytes(t)
        total += nbytes
        scale = f"{read_i2s(reader, t)[1]:.6g}" if int(t.tensor_type) == I2S_TYPE else ""
        rows.append((t.name, t.tensor_type.name, "[" + ", ".join(str(int(d)) for d in t.shape) + "]", str(nbytes), scale))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["", "tensors:"]
    lines += ["  " + "  ".join(c.ljust(w) if i != 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
              for r in rows]
    lines.append(f"  total tensor bytes: {total}")
    return "\n".join(lines)

