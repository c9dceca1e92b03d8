"""Output precisions of an embedding: one record each, sentence-transformers' ``quantize_embeddings``
byte for byte, and the calibration ranges int8 / uint8 scale by.

- ``float32``: the vector as it is.
- ``uint8`` / ``int8``: per dimension, ``floor((x - min) / step)`` clipped to 0..255 with
  ``step = (max - min) / 255`` (1 where max == min), from ranges ``[2, width]`` (row 0 the minima,
  row 1 the maxima, float32); int8 is that minus 128.
- ``ubinary``: the sign bits (x > 0) packed 8 per byte, first dimension in the top bit (numpy's
  ``packbits``), the last byte zero-padded; ``binary`` is that minus 128 as int8 (offset binary).

Matryoshka truncation comes first, then quantization, as sentence-transformers orders them, so a
range belongs to one width. A calibration file (``calibration_ranges.json``, written by
``bitnet-onnx calibrate`` / ``Embedder.calibrate``) keeps the ranges of each width a user computed
once from texts; ``ranges_for`` picks the row for a width. The numpy functions here are the one
definition: the runtime applies them, and the exporter's in-graph nodes (export/output_precision.py)
are tested equal to them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import atomic_file, check_input_file, open_input_file, read_json_object

FLOAT32 = "float32"
CALIBRATION_FILE = "calibration_ranges.json"  # in an export folder: the ranges Embedder and serve use
CALIBRATION_FORMAT = 1
LEVELS = 255  # uint8 steps between a dimension's minimum and maximum


@dataclass(frozen=True)
class Precision:
    """One output precision: how a float32 [n, width] batch becomes its stored values."""

    name: str
    dtype: str  # numpy dtype of a stored value
    bits: int  # bits per dimension of the embedding (32, 8 or 1)
    needs_ranges: bool  # scaled per dimension by calibration ranges
    quantize: Callable[[np.ndarray, np.ndarray | None], np.ndarray]  # (float32 [n, width], ranges) -> [n, values]

    def values(self, width: int) -> int:
        """Stored values per vector of ``width`` dimensions (bytes for the 8- and 1-bit ones)."""
        return math.ceil(width * self.bits / np.dtype(self.dtype).itemsize / 8)

    def bytes_per_vector(self, width: int) -> int:
        return self.values(width) * np.dtype(self.dtype).itemsize


def _as_float32(x: np.ndarray, ranges: np.ndarray | None) -> np.ndarray:
    return x.astype(np.float32)


def level_scale(ranges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, steps) float32 [width] of checked ranges: level = clip(floor((x - starts) / steps), 0, 255)."""
    starts = ranges[0, :]
    steps = (ranges[1, :] - starts) / LEVELS
    return starts, np.where(steps == 0, 1, steps).astype(np.float32)


def _levels(x: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """The uint8 level of every value, as float32 (sentence-transformers' arithmetic, in its order)."""
    starts, steps = level_scale(ranges)
    return np.clip(np.floor((x - starts) / steps), 0, LEVELS)


def _uint8(x: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    return _levels(x, ranges).astype(np.uint8)


def _int8(x: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    return (_levels(x, ranges) - 128).astype(np.int8)


def _ubinary(x: np.ndarray, ranges: np.ndarray | None) -> np.ndarray:
    return np.packbits(x > 0, axis=-1)


def _binary(x: np.ndarray, ranges: np.ndarray | None) -> np.ndarray:
    return (np.packbits(x > 0, axis=-1) - 128).astype(np.int8)


_RECORDS = (
    Precision(FLOAT32, "float32", 32, False, _as_float32),
    Precision("int8", "int8", 8, True, _int8),
    Precision("uint8", "uint8", 8, True, _uint8),
    Precision("binary", "int8", 1, False, _binary),
    Precision("ubinary", "uint8", 1, False, _ubinary),
)
PRECISIONS: dict[str, Precision] = {p.name: p for p in _RECORDS}
NAMES = tuple(PRECISIONS)


def get_precision(name, what: str = "precision") -> Precision:
    """The record of ``name``; an error naming ``what`` and the choices for anything else."""
    if not isinstance(name, str) or name not in PRECISIONS:
        raise BitnetOnnxError(f"{what} must be one of {', '.join(NAMES)}, got {name!r}")
    return PRECISIONS[name]


def quantize(embeddings: np.ndarray, precision: str, ranges: np.ndarray | None = None,
             what: str = "precision") -> np.ndarray:
    """float32 [n, width] -> ``precision``'s values [n, values(width)]; ``ranges`` [2, width] for int8 / uint8
    (checked here: an error naming them when missing, of another width or not finite)."""
    record = get_precision(precision, what)
    x = np.asarray(embeddings, dtype=np.float32)
    if x.ndim != 2:
        raise BitnetOnnxError(f"embeddings to quantize must be [n, width], got shape {x.shape}")
    if record.needs_ranges:
        if ranges is None:
            raise BitnetOnnxError(f"{what} {record.name} needs calibration ranges [2, {x.shape[1]}]: pass ranges, "
                                  f"or compute them once with 'bitnet-onnx calibrate' (Embedder.calibrate)")
        ranges = check_ranges(ranges, x.shape[1])
    return record.quantize(x, ranges)


def check_ranges(ranges, width: int, what: str = "ranges") -> np.ndarray:
    """``ranges`` as float32 [2, width] (minima, maxima), or an error naming its fault."""
    try:
        r = np.asarray(ranges, dtype=np.float32)
    except (TypeError, ValueError):
        raise BitnetOnnxError(f"{what} must be numbers [2, {width}] (minima, maxima), got {type(ranges).__name__}") from None
    if r.shape != (2, width):
        raise BitnetOnnxError(f"{what} has shape {list(r.shape)}, expected [2, {width}] (minima, maxima of "
                              f"each of the {width} dimensions)")
    bad = np.flatnonzero(~np.isfinite(r).all(axis=0))
    if bad.size:
        raise BitnetOnnxError(f"{what} holds a value that is not finite (dimension {int(bad[0])})")
    bad = np.flatnonzero(r[1] < r[0])
    if bad.size:
        raise BitnetOnnxError(f"{what}: maximum below minimum in dimension {int(bad[0])} "
                              f"({float(r[1, bad[0]])!r} < {float(r[0, bad[0]])!r})")
    return r


def calibration_ranges(embeddings: np.ndarray) -> np.ndarray:
    """float32 [2, width]: each dimension's minimum and maximum over ``embeddings`` [n, width] (n >= 2),
    as sentence-transformers computes them from calibration embeddings."""
    x = np.asarray(embeddings, dtype=np.float32)
    if x.ndim != 2 or x.shape[0] < 2:
        raise BitnetOnnxError(f"calibration needs at least 2 embeddings, got {x.shape[0] if x.ndim == 2 else x.shape}")
    return np.vstack((np.min(x, axis=0), np.max(x, axis=0))).astype(np.float32)


# ---- calibration files ------------------------------------------------------------------------

def read_ranges(path: str | Path, what: str = "ranges") -> dict[int, np.ndarray]:
    """width -> float32 [2, width] from a calibration file (.json written by ``calibrate``) or a .npy
    array [2, width] (sentence-transformers users' ``np.save(ranges)``)."""
    path = Path(path)
    if path.suffix.lower() == ".npy":
        check_input_file(path, what)
        with open_input_file(path, what) as f:
            try:
                array = np.load(f, allow_pickle=False)
            except (ValueError, OSError, EOFError) as e:
                raise BitnetOnnxError(f"{path}: not a readable .npy array ({str(e).splitlines()[0]})") from None
        if array.ndim != 2:
            raise BitnetOnnxError(f"{path}: ranges must be an array [2, width] (minima, maxima), got shape "
                                  f"{list(array.shape)}")
        return {array.shape[1]: check_ranges(array, array.shape[1], str(path))}
    data = read_json_object(path, what)
    table = data.get("ranges")
    if data.get("format_version") != CALIBRATION_FORMAT or not isinstance(table, dict) or not table:
        raise BitnetOnnxError(f"{path}: not a calibration file (expected format_version {CALIBRATION_FORMAT} "
                              "and a \"ranges\" object, as 'bitnet-onnx calibrate' writes)")
    out = {}
    for key, value in table.items():
        if not key.isdigit() or int(key) < 1:
            raise BitnetOnnxError(f"{path}: ranges key {key!r} is not a width")
        out[int(key)] = check_ranges(value, int(key), f"{path}: ranges[{key}]")
    return out


def write_ranges(path: str | Path, ranges: dict[int, np.ndarray], info: dict | None = None) -> Path:
    """Writes (all or nothing) a calibration file holding ``ranges`` (width -> [2, width]); widths already in
    the file and not in ``ranges`` are kept."""
    path = Path(path)
    table = read_ranges(path) if path.is_file() and path.suffix.lower() == ".json" else {}
    table.update({w: check_ranges(r, w) for w, r in ranges.items()})
    body = {"format_version": CALIBRATION_FORMAT, **(info or {}),
            "ranges": {str(w): table[w].tolist() for w in sorted(table)}}
    with atomic_file(path, what="ranges file") as tmp:
        tmp.write_text(json.dumps(body) + "\n", encoding="utf-8")
    return path


def ranges_for(width: int, given=None, table: dict[int, np.ndarray] | None = None,
               source: str = "the calibration file") -> np.ndarray | None:
    """The ranges for ``width``: ``given`` (an array [2, width] or a calibration file's path), else the
    width's row of ``table`` (None when there is none)."""
    if isinstance(given, (str, Path)):
        table, source, given = read_ranges(given), str(given), None
    if given is not None:
        return check_ranges(given, width)
    if table is None:
        return None
    if width not in table:
        raise BitnetOnnxError(f"{source} has ranges for width {', '.join(map(str, sorted(table)))}, not {width}; "
                              f"run 'bitnet-onnx calibrate' with --dimensions {width}")
    return table[width]
