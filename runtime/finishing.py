"""The rows a graph gives -> the rows a call asked for (``Finishing``, one per ``Embedder``): the first
``dimensions`` values (Matryoshka), L2 normalization, then the output precision (bitnet_onnx.precision:
int8 / uint8 scaled by calibration ranges, binary / ubinary), each option checked before anything runs.
A graph that quantizes its own output (export --output-precision) is given back as it is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.precision import (CALIBRATION_FILE, FLOAT32, PRECISIONS, get_precision, quantize, ranges_for,
                                   read_ranges)
from bitnet_onnx.st_modules import L2_NORM_EPS

# (width, normalize, precision, its ranges): a call's finishing options once checked
Options = tuple[int, "bool | None", str, "np.ndarray | None"]


class Finishing:
    """The finishing steps of the export in ``folder`` (its ``manifest``); calibration files read once each."""

    def __init__(self, folder: Path, manifest: Manifest):
        self.folder, self.manifest = folder, manifest
        self.dimension = int(manifest.dimension)
        self.graph_precision = manifest.output_precision  # the precision of the graph's sentence_embedding
        self._calibrations: dict[Path, dict] = {}  # calibration files read, by path (``calibration``)

    def options(self, dimensions: int | None, normalize: bool | None, precision: str | None, ranges) -> Options:
        """A call's finishing options checked: an error naming the fault before any text is embedded."""
        width = self.check_dimensions(dimensions)
        name, resolved = self.check_precision(precision, ranges, width)
        self.check_graph_output(width, normalize)
        return width, normalize, name, resolved

    def rows(self, rows: np.ndarray, width: int, normalize: bool | None, precision: str, ranges) -> np.ndarray:
        """The graph's sentence embeddings [n, dimension] finished with checked ``options`` (checked once, by
        ``options``, not again for every batch a server finishes)."""
        out = self.truncate(rows, width, normalize)
        return out if precision == self.graph_precision else quantize(out, precision, ranges)

    def stack(self, rows: list) -> np.ndarray:
        """The graph's rows of n texts (one array each) stacked [n, values]; none: an empty array of its dtype."""
        record = PRECISIONS[self.graph_precision]
        return np.stack(rows) if rows else np.zeros((0, record.values(self.dimension)), dtype=np.dtype(record.dtype))

    def check_dimensions(self, dimensions: int | None) -> int:
        """The width a call's ``dimensions`` keeps (None: the full dimension), or an error naming the range."""
        if dimensions is None:
            return self.dimension
        if isinstance(dimensions, bool) or not isinstance(dimensions, (int, np.integer)) \
                or not 1 <= dimensions <= self.dimension:
            raise BitnetOnnxError(f"dimensions must be an integer from 1 to {self.dimension}, got {dimensions!r}")
        return int(dimensions)

    def check_graph_output(self, width: int, normalize: bool | None) -> None:
        """A graph that quantizes its own output takes no width or normalization of ours."""
        if self.graph_precision != FLOAT32 and (width != self.dimension or normalize is not None):
            raise BitnetOnnxError(f"{self.folder} outputs {self.graph_precision} embeddings from its graph "
                                  "(export --output-precision): dimensions and normalize cannot apply")

    def truncate(self, rows: np.ndarray, width: int, normalize: bool | None = None) -> np.ndarray:
        """The graph's sentence embeddings -> the first ``width`` values, L2-normalized when ``normalize``
        (None: the manifest's choice) asks for it."""
        if self.graph_precision != FLOAT32:  # the graph's own quantized output, as it is
            self.check_graph_output(width, normalize)
            return np.asarray(rows)
        out = np.ascontiguousarray(np.asarray(rows)[:, :width], dtype=np.float32)
        # None on a graph that normalizes: its full-width vectors are kept as they are (bit for bit what
        # other hosts and an in-graph --output-precision quantize), truncated ones renormalized
        if normalize or normalize is None and self.manifest.normalize and width < self.dimension:
            out = l2_normalize(out)
        return out

    def quantize(self, rows: np.ndarray, precision: str | None = None, ranges=None) -> np.ndarray:
        """float32 embeddings [n, width] -> ``precision``'s values (bitnet_onnx.precision), with ``ranges``
        or, for int8 / uint8 without them, the folder's calibration file's ranges of ``width``."""
        name, resolved = self.check_precision(precision, ranges, np.shape(rows)[1])
        if name == self.graph_precision:
            return rows
        return quantize(rows, name, resolved)

    def check_precision(self, precision: str | None, ranges, width: int) -> tuple[str, np.ndarray | None]:
        """(precision's name, its ranges for ``width``) for ``quantize``, or an error naming the fault."""
        if self.graph_precision != FLOAT32:
            if precision not in (None, self.graph_precision) or ranges is not None:
                raise BitnetOnnxError(f"{self.folder} outputs {self.graph_precision} embeddings from its graph "
                                      f"(export --output-precision); precision {precision!r} cannot apply")
            return self.graph_precision, None
        record = get_precision(FLOAT32 if precision is None else precision)
        if not record.needs_ranges:  # ranges given anyway are ignored, as sentence-transformers ignores them
            return record.name, None
        resolved = self.ranges(width, ranges)
        if resolved is None:
            raise BitnetOnnxError(f"precision {record.name} needs calibration ranges [2, {width}]: pass ranges, or "
                                  f"compute them once with 'bitnet-onnx calibrate {self.folder}' "
                                  f"(writes {self.folder / CALIBRATION_FILE})")
        return record.name, resolved

    def ranges(self, width: int, given=None):
        """The calibration ranges for ``width``: ``given`` (an array [2, width], or a calibration file's path),
        else the folder's calibration_ranges.json row for it (None without that file)."""
        if given is not None and not isinstance(given, (str, Path)):
            return ranges_for(width, given)
        path = Path(given) if given is not None else self.folder / CALIBRATION_FILE
        table = self.calibration(path) if given is not None or path.is_file() else None
        return ranges_for(width, None, table, str(path))

    def calibration(self, path: str | Path | None = None) -> dict[int, np.ndarray]:
        """The calibration file ``path`` (default: the folder's calibration_ranges.json) as width -> float32
        [2, width], read once (``forget_calibrations`` after rewriting one)."""
        path = Path(path) if path is not None else self.folder / CALIBRATION_FILE
        if path not in self._calibrations:
            self._calibrations[path] = read_ranges(path)
        return self._calibrations[path]

    def forget_calibrations(self) -> None:
        self._calibrations.clear()


def l2_normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norms, L2_NORM_EPS)).astype(np.float32, copy=False)
