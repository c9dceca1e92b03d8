"""The job's inputs cut into blocks (bitnet_onnx.runtime.dataset): planned on the driver from metadata and line
offsets only (``input_files``, ``plan_blocks``: a Parquet row group in slices of at most ``block_rows`` rows,
``block_rows`` lines of a JSONL file), and one block read on a worker (``read_block``).
"""

from __future__ import annotations

import glob
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import check_input_file, open_input_file

PARQUET_SUFFIXES = (".parquet", ".pq")
JSONL_SUFFIXES = (".jsonl", ".ndjson")


@dataclass(frozen=True)
class Block:
    """Rows [first, first + rows) of one input file."""

    file: str
    file_index: int
    index: int  # block number within the file
    first: int  # first row (line for JSONL), 0-based
    rows: int
    row_group: int = -1  # Parquet: the row group holding the block
    slice: int = 0  # Parquet: the block's slice of ``stride`` rows within its row group
    stride: int = 0  # Parquet: the block_rows of the plan
    byte_start: int = 0  # JSONL: byte offset of the block's first line
    byte_end: int = 0

    @property
    def part_name(self) -> str:
        return f"part-{self.file_index:05d}-{self.index:06d}.parquet"


def input_files(spec: str | Path) -> list[Path]:
    """A file, a folder (its Parquet/JSONL files) or a glob, sorted; an error when nothing matches."""
    text = str(spec)
    path = Path(text)
    if path.is_dir():
        files = [p for p in sorted(path.iterdir()) if p.suffix.lower() in PARQUET_SUFFIXES + JSONL_SUFFIXES]
    elif path.exists():  # a FIFO or device too: refused by name when planned, never opened
        files = [path]
    else:
        files = [Path(p) for p in sorted(glob.glob(text)) if Path(p).is_file()]
    if not files:
        raise BitnetOnnxError(f"{spec}: no input file (a .parquet or .jsonl file, a folder of them, or a glob)")
    for f in files:
        if f.suffix.lower() not in PARQUET_SUFFIXES + JSONL_SUFFIXES:
            raise BitnetOnnxError(f"{f}: unknown input format; use .parquet or .jsonl")
    return files


def plan_blocks(files: list[Path], block_rows: int, text_column: str) -> list[Block]:
    if block_rows < 1:
        raise BitnetOnnxError(f"--block-rows must be >= 1, got {block_rows}")
    blocks: list[Block] = []
    for i, f in enumerate(files):
        plan = _parquet_blocks if f.suffix.lower() in PARQUET_SUFFIXES else _jsonl_blocks
        blocks += plan(f, i, block_rows, text_column)
    return blocks


def _parquet_blocks(f: Path, file_index: int, block_rows: int, text_column: str) -> list[Block]:
    import pyarrow.parquet as pq

    check_input_file(f)  # a FIFO matched by a glob would block pyarrow's open
    try:
        meta = pq.ParquetFile(f).metadata
        schema = pq.read_schema(f)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise BitnetOnnxError(f"{f}: not a readable Parquet file ({str(e).splitlines()[0]})") from None
    if text_column not in schema.names:
        raise BitnetOnnxError(f"{f}: no column {text_column!r} (columns: {', '.join(schema.names)}); "
                              "set --text-column")
    blocks, first = [], 0
    for rg in range(meta.num_row_groups):
        n = meta.row_group(rg).num_rows
        for s, start in enumerate(range(0, n, block_rows)):
            rows = min(block_rows, n - start)
            blocks.append(Block(str(f), file_index, len(blocks), first + start, rows, row_group=rg, slice=s,
                                stride=block_rows))
        first += n
    return blocks


def _jsonl_blocks(f: Path, file_index: int, block_rows: int, text_column: str) -> list[Block]:
    blocks, line, start, pos = [], 0, 0, 0
    try:
        with open_input_file(f) as fh:
            for raw in fh:
                pos += len(raw)
                line += 1
                if line % block_rows == 0:
                    blocks.append(Block(str(f), file_index, len(blocks), line - block_rows, block_rows,
                                        byte_start=start, byte_end=pos))
                    start = pos
    except OSError as e:
        raise BitnetOnnxError(f"{f}: cannot read ({e.strerror})") from None
    if line % block_rows:
        rows = line % block_rows
        blocks.append(Block(str(f), file_index, len(blocks), line - rows, rows, byte_start=start, byte_end=pos))
    return blocks


def read_block(block: Block, text_column: str, id_column: str) -> tuple[list[str], list[Any]]:
    """(texts, ids) of a block; an error naming the file and row for a missing, null or non-string text.
    Rows without the id column get ``<file name>:<row>`` ids."""
    if block.row_group >= 0:
        texts, ids = _read_parquet_block(block, text_column, id_column)
    else:
        texts, ids = _read_jsonl_block(block, text_column, id_column)
    for j, t in enumerate(texts):
        if not isinstance(t, str):
            what = "null" if t is None else type(t).__name__
            raise BitnetOnnxError(f"{block.file}: row {block.first + j}: {text_column!r} is {what}, expected a string")
    ids = [f"{Path(block.file).name}:{block.first + j}" if v is None else v for j, v in enumerate(ids)]
    return texts, ids


def _read_parquet_block(block: Block, text_column: str, id_column: str) -> tuple[list, list]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(block.file)
    columns = [c for c in (text_column, id_column) if c in pf.schema_arrow.names]
    batches = pf.iter_batches(batch_size=block.stride, row_groups=[block.row_group], columns=columns)
    for s, batch in enumerate(batches):
        if s == block.slice and batch.num_rows == block.rows:
            data = batch.to_pydict()
            return data[text_column], data.get(id_column, [None] * batch.num_rows)
    raise BitnetOnnxError(f"{block.file}: row group {block.row_group} has fewer rows than planned; was it changed?")


def _read_jsonl_block(block: Block, text_column: str, id_column: str) -> tuple[list, list]:
    texts, ids = [], []
    with open_input_file(block.file) as fh:
        fh.seek(block.byte_start)
        data = fh.read(block.byte_end - block.byte_start)
    for j, raw in enumerate(data.splitlines()):
        row = block.first + j
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BitnetOnnxError(f"{block.file}: line {row + 1}: not valid JSON ({e})") from None
        if not isinstance(record, dict) or text_column not in record:
            raise BitnetOnnxError(f"{block.file}: line {row + 1}: no {text_column!r} field; set --text-column")
        texts.append(record[text_column])
        ids.append(record.get(id_column))
    if len(texts) != block.rows:
        raise BitnetOnnxError(f"{block.file}: has fewer lines than planned; was it changed?")
    return texts, ids
