"""A GGUF file's metadata and tensor table, I2_S included (the `inspect` verb prints it)."""

from __future__ import annotations

from pathlib import Path

from bitnet_onnx.gguf_file import I2S_TYPE, field_value, open_gguf, read_i2s, tensor_nbytes

ARRAY_PREVIEW = 6  # array elements printed unless --all


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

