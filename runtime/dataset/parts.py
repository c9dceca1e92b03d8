"""The job's output folder (bitnet_onnx.runtime.dataset): one Parquet part per block (``write_part``: id,
``embedding`` typed by the precision, ``token_count``), the plan a rerun must match (``PLAN``), the marker of a
complete job (``SUCCESS``), and the parts read back in input order (``read_output``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import atomic_file, read_json

SUCCESS = "_SUCCESS"
PLAN = "_plan.json"  # the inputs a folder's parts come from: a rerun must name the same ones
EMBEDDING, TOKENS, ID = "embedding", "token_count", "id"


def embedding_column(vectors: np.ndarray, precision: str = "float32"):
    """The Arrow column of ``precision``'s vectors [n, values]: a fixed-size list of float32, int8 or uint8
    (binary: its int8 values), or for ubinary fixed-size binary (the packed bytes as they are stored)."""
    import pyarrow as pa

    from bitnet_onnx.precision import PRECISIONS

    dtype = np.dtype(PRECISIONS[precision].dtype)
    data = np.ascontiguousarray(vectors, dtype=dtype)
    if precision == "ubinary":
        return pa.array([row.tobytes() for row in data], type=pa.binary(data.shape[1]))
    return pa.FixedSizeListArray.from_arrays(pa.array(data.reshape(-1)), data.shape[1])


def column_values(column) -> np.ndarray:
    """``embedding_column``'s arrays back as a numpy array [n, values] of their dtype."""
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_fixed_size_binary(column.type):
        width = column.type.byte_width
        return np.frombuffer(b"".join(column.to_pylist()), np.uint8).reshape(-1, width)
    return column.flatten().to_numpy().reshape(-1, column.type.list_size)


def write_part(path: Path, ids: list, vectors: np.ndarray, counts: np.ndarray, precision: str = "float32") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({ID: pa.array(ids), EMBEDDING: embedding_column(vectors, precision), TOKENS: pa.array(counts)})
    with atomic_file(path, what="part") as tmp:
        pq.write_table(table, tmp)


def read_output(output_dir: str | Path) -> tuple[list, np.ndarray, np.ndarray]:
    """(ids, embeddings [n, values] of the job's precision, token counts) of a complete job, in input order."""
    import pyarrow.parquet as pq

    out = Path(output_dir)
    if not (out / SUCCESS).is_file():
        raise BitnetOnnxError(f"{out}: no {SUCCESS}: the job did not complete (rerun it to finish)")
    parts = read_json(out / SUCCESS)["parts"]
    tables = [pq.read_table(out / p) for p in parts]
    ids = [v for t in tables for v in t.column(ID).to_pylist()]
    vectors = np.concatenate([column_values(t.column(EMBEDDING)) for t in tables]) \
        if tables else np.zeros((0, 0), np.float32)
    counts = np.concatenate([t.column(TOKENS).to_numpy() for t in tables]) if tables else np.zeros(0, np.int32)
    return ids, vectors, counts


def check_output_dir(out: Path, files: list[Path], export_dir: str | Path) -> None:
    from bitnet_onnx.io import check_apart

    check_apart(out, [*files, export_dir], what="OUTPUT_DIR")
    if out.exists() and not out.is_dir():
        raise BitnetOnnxError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / PLAN).is_file():
        raise BitnetOnnxError(f"{out}: a non-empty folder not written by embed-dataset; choose an empty one")


def write_plan(out: Path, files: list[Path], block_rows: int, opts) -> None:
    """Records what the parts are made of (``opts``: the job's EmbedOptions); a rerun with other inputs or
    options is refused."""
    plan = {"inputs": [str(f.resolve()) for f in files], "block_rows": block_rows,
            "text_column": opts.text_column, "id_column": opts.id_column, "prompt_name": opts.prompt_name,
            "dimensions": opts.dimensions}
    if opts.precision != "float32":  # float32 plans read as before (folders of earlier versions resume)
        plan.update(precision=opts.precision, ranges=_digest(opts.ranges))
    out.mkdir(parents=True, exist_ok=True)  # after the inputs were planned: a bad input leaves nothing
    path = out / PLAN
    if path.is_file():
        before = read_json(path)
        if before != plan:
            changed = sorted(k for k in plan if before.get(k) != plan[k])
            raise BitnetOnnxError(f"{out}: holds parts of another job ({', '.join(changed)} differ); "
                                  "use another OUTPUT_DIR or remove it")
        return
    with atomic_file(path, what="plan") as tmp:
        tmp.write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")


def _digest(ranges: tuple | None) -> str | None:
    """A short fingerprint of the ranges a plan quantizes by (a rerun with other ranges is refused)."""
    import hashlib

    return None if ranges is None else hashlib.sha256(np.array(ranges, np.float32).tobytes()).hexdigest()[:16]
