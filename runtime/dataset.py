"""Embedding corpora with Ray Data: a ``map_batches`` stage for Ray users, and a resumable
Parquet/JSONL -> Parquet job (``bitnet-onnx embed-dataset``). Needs the ``ray`` extra
(``pip install bitnet-onnx[ray]``); nothing else in the package imports this module.

The job cuts every input file into fixed blocks (a Parquet row group, in slices of at most
``block_rows`` rows; ``block_rows`` lines of a JSONL file) and plans them on the driver without
reading any text. Each block is one task of an actor pool (one ONNX Runtime session per actor,
created once): the actor reads its block, embeds it in token-budget batches and writes
``part-<file>-<block>.parquet`` under a temp name, renamed when complete. A rerun skips the blocks
whose part exists, so an interrupted job finishes with the same output as an uninterrupted one;
``_SUCCESS`` marks a complete output folder. Memory per actor follows ``block_rows``, not the
corpus size.
"""

from __future__ import annotations

import glob
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import atomic_file, check_input_file, open_input_file, read_json

PARQUET_SUFFIXES = (".parquet", ".pq")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
SUCCESS = "_SUCCESS"
PLAN = "_plan.json"  # the inputs a folder's parts come from: a rerun must name the same ones
EMBEDDING, TOKENS, ID = "embedding", "token_count", "id"


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


@dataclass(frozen=True)
class EmbedOptions:
    text_column: str = "text"
    id_column: str = "id"
    prompt_name: str | None = None
    dimensions: int | None = None
    batch_size: int = 32
    threads_per_worker: int = 1
    precision: str = "float32"  # bitnet_onnx.precision; the embedding column's type follows (embedding_column)
    ranges: tuple | None = None  # int8 / uint8: the checked ranges [2, width] as nested tuples (pickled to actors)

    def with_ranges(self, export_dir: str | Path, given=None) -> "EmbedOptions":
        """These options with the precision checked and its ranges resolved on the driver (``given``: an
        array or a calibration file; None: the export's calibration_ranges.json), before any actor starts:
        the Embedder's own finishing rules (runtime/finishing.py), without a session."""
        from bitnet_onnx.manifest import Manifest
        from bitnet_onnx.precision import FLOAT32, get_precision
        from bitnet_onnx.runtime.finishing import Finishing

        get_precision(self.precision, "--precision")  # an unknown name, named as the flag
        finishing = Finishing(Path(export_dir), Manifest.read(Path(export_dir)))
        if finishing.graph_precision != FLOAT32:
            raise BitnetOnnxError(f"{export_dir}: its graph outputs {finishing.graph_precision} embeddings "
                                  "(export --output-precision); embed a float32 export with --precision")
        width = finishing.check_dimensions(self.dimensions)
        _, ranges = finishing.check_precision(self.precision, given, width)
        return self if ranges is None else replace(self, ranges=tuple(map(tuple, ranges.tolist())))


# ---- planning (driver side: metadata and line offsets only) ---------------------------------

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


# ---- reading one block (worker side) ---------------------------------------------------------

def read_block(block: Block, opts: EmbedOptions) -> tuple[list[str], list[Any]]:
    """(texts, ids) of a block; an error naming the file and row for a missing, null or non-string text.
    Rows without the id column get ``<file name>:<row>`` ids."""
    if block.row_group >= 0:
        texts, ids = _read_parquet_block(block, opts)
    else:
        texts, ids = _read_jsonl_block(block, opts)
    for j, t in enumerate(texts):
        if not isinstance(t, str):
            what = "null" if t is None else type(t).__name__
            raise BitnetOnnxError(f"{block.file}: row {block.first + j}: {opts.text_column!r} is {what}, expected a string")
    ids = [f"{Path(block.file).name}:{block.first + j}" if v is None else v for j, v in enumerate(ids)]
    return texts, ids


def _read_parquet_block(block: Block, opts: EmbedOptions) -> tuple[list, list]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(block.file)
    columns = [c for c in (opts.text_column, opts.id_column) if c in pf.schema_arrow.names]
    batches = pf.iter_batches(batch_size=block.stride, row_groups=[block.row_group], columns=columns)
    for s, batch in enumerate(batches):
        if s == block.slice and batch.num_rows == block.rows:
            data = batch.to_pydict()
            return data[opts.text_column], data.get(opts.id_column, [None] * batch.num_rows)
    raise BitnetOnnxError(f"{block.file}: row group {block.row_group} has fewer rows than planned; was it changed?")


def _read_jsonl_block(block: Block, opts: EmbedOptions) -> tuple[list, list]:
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
        if not isinstance(record, dict) or opts.text_column not in record:
            raise BitnetOnnxError(f"{block.file}: line {row + 1}: no {opts.text_column!r} field; set --text-column")
        texts.append(record[opts.text_column])
        ids.append(record.get(opts.id_column))
    if len(texts) != block.rows:
        raise BitnetOnnxError(f"{block.file}: has fewer lines than planned; was it changed?")
    return texts, ids


# ---- the actors -------------------------------------------------------------------------------

class _EmbedderActor:
    """Holds one Embedder (one ORT session), created once per actor."""

    def __init__(self, export_dir: str, opts: EmbedOptions):
        from bitnet_onnx.runtime.embedder import Embedder

        self.opts = opts
        self.embedder = Embedder(export_dir, threads=opts.threads_per_worker)

    def embed(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(the precision's vectors [n, values], int32 token counts [n]), as Embedder.encode gives them:
        prepared once (the counts and the model's input), run to finished rows."""
        o = self.opts
        ranges = None if o.ranges is None else np.array(o.ranges, np.float32)
        prepared = self.embedder.prepare(texts, prompt_name=o.prompt_name, dimensions=o.dimensions,
                                         precision=o.precision, ranges=ranges)
        return self.embedder.embed(prepared, batch_size=o.batch_size), np.array(prepared.token_counts, np.int32)


class EmbedColumn(_EmbedderActor):
    """``map_batches`` callable: adds ``embedding`` (typed by the precision, ``embedding_column``) and ``token_count``."""

    def __call__(self, batch):
        import pyarrow as pa

        table = batch if isinstance(batch, pa.Table) else pa.table(batch)
        column = table.column(self.opts.text_column).to_pylist()
        bad = next((j for j, t in enumerate(column) if not isinstance(t, str)), None)
        if bad is not None:
            raise BitnetOnnxError(f"row {bad} of a batch: {self.opts.text_column!r} is not a string ({column[bad]!r})")
        vectors, counts = self.embed(column)
        column = embedding_column(vectors, self.opts.precision)
        return table.append_column(EMBEDDING, column).append_column(TOKENS, pa.array(counts))


class EmbedBlocks(_EmbedderActor):
    """``map_batches`` callable of the job: each row is a planned Block; embeds and writes its part."""

    def __init__(self, export_dir: str, opts: EmbedOptions, output_dir: str):
        super().__init__(export_dir, opts)
        self.output_dir = Path(output_dir)

    def __call__(self, batch: dict) -> dict:
        out = {"part": [], "texts": [], "tokens": [], "seconds": []}
        for item in batch["block"]:
            block = Block(**json.loads(item))
            start = time.perf_counter()
            texts, ids = read_block(block, self.opts)
            vectors, counts = self.embed(texts)
            write_part(self.output_dir / block.part_name, ids, vectors, counts, self.opts.precision)
            out["part"].append(block.part_name)
            out["texts"].append(len(texts))
            out["tokens"].append(int(counts.sum()))
            out["seconds"].append(time.perf_counter() - start)
        return out


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


# ---- the public API ---------------------------------------------------------------------------

def embed_dataset(ds, export_dir: str | Path, *, text_column: str = "text", workers: int = 1,
                  threads_per_worker: int = 1, batch_size: int = 32, prompt_name: str | None = None,
                  dimensions: int | None = None, rows_per_batch: int = 256, precision: str = "float32",
                  ranges=None):
    """``ds`` (a ``ray.data.Dataset`` with a string column ``text_column``) with two more columns:
    ``embedding`` (as ``Embedder.encode`` gives it: a fixed-size list of float32, int8 or uint8, or
    fixed-size binary for ``precision="ubinary"``) and ``token_count``. int8 / uint8 scale by ``ranges``
    (an array [2, width] or a calibration file; None: the export's calibration_ranges.json).

    Lazy, like every Ray Data stage: it composes with the caller's pipeline. ``workers`` actors,
    each with one ONNX Runtime session of ``threads_per_worker`` threads, created once.
    """
    import ray.data

    opts = EmbedOptions(text_column=text_column, prompt_name=prompt_name, dimensions=dimensions,
                        batch_size=batch_size, threads_per_worker=threads_per_worker,
                        precision=precision).with_ranges(export_dir, ranges)
    return ds.map_batches(EmbedColumn, fn_constructor_args=(str(export_dir), opts), batch_size=rows_per_batch,
                          batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=workers),
                          num_cpus=threads_per_worker)


@dataclass
class JobSummary:
    blocks: int
    skipped: int  # blocks already complete from an earlier run
    texts: int
    tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def run_job(export_dir: str | Path, inputs: str | Path, output_dir: str | Path, opts: EmbedOptions,
            workers: int = 1, block_rows: int = 4096, ray_address: str | None = None,
            ranges=None) -> JobSummary:
    """Embeds every text of ``inputs`` into Parquet parts under ``output_dir``; resumable (see module doc).
    ``ranges``: for ``opts.precision`` int8 / uint8 (``EmbedOptions.with_ranges``)."""
    from bitnet_onnx.manifest import Manifest

    start = time.perf_counter()
    manifest = Manifest.read(Path(export_dir))  # clear errors before any cluster starts
    if opts.dimensions is not None and not 1 <= opts.dimensions <= manifest.dimension:
        raise BitnetOnnxError(f"--dimensions {opts.dimensions} is outside 1..{manifest.dimension}")
    if opts.prompt_name is not None and opts.prompt_name not in manifest.prompts:
        raise BitnetOnnxError(f"--prompt-name {opts.prompt_name!r} is not one of the export's prompts "
                              f"({', '.join(manifest.prompts) or 'none'})")
    opts = opts.with_ranges(export_dir, ranges)
    files = input_files(inputs)
    out = Path(output_dir)
    _check_output_dir(out, files, export_dir)
    blocks = plan_blocks(files, block_rows, opts.text_column)
    _write_plan(out, files, block_rows, opts)
    todo = [b for b in blocks if not (out / b.part_name).is_file()]
    texts = tokens = 0
    if todo:
        import ray  # after every check: importing it takes seconds
        import ray.data

        if not ray.is_initialized():
            ray.init(address=ray_address, include_dashboard=False, log_to_driver=False,
                     **({} if ray_address else {"num_cpus": max(workers * opts.threads_per_worker, 1)}))
        items = ray.data.from_items([{"block": json.dumps(asdict(b))} for b in todo], override_num_blocks=len(todo))
        done = items.map_batches(EmbedBlocks, fn_constructor_args=(str(export_dir), opts, str(out)),
                                 batch_size=1, compute=ray.data.ActorPoolStrategy(size=workers),
                                 num_cpus=opts.threads_per_worker)
        try:
            rows = done.take_all()
        except Exception as e:  # a worker's BitnetOnnxError arrives wrapped in Ray's task error
            raise BitnetOnnxError(_worker_error(e)) from None
        texts, tokens = sum(r["texts"] for r in rows), sum(r["tokens"] for r in rows)
    with atomic_file(out / SUCCESS, what="marker") as tmp:
        tmp.write_text(json.dumps({"blocks": len(blocks), "parts": [b.part_name for b in blocks]}) + "\n")
    return JobSummary(len(blocks), len(blocks) - len(todo), texts, tokens, time.perf_counter() - start)


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


def _check_output_dir(out: Path, files: list[Path], export_dir: str | Path) -> None:
    from bitnet_onnx.io import check_apart

    check_apart(out, [*files, export_dir], what="OUTPUT_DIR")
    if out.exists() and not out.is_dir():
        raise BitnetOnnxError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / PLAN).is_file():
        raise BitnetOnnxError(f"{out}: a non-empty folder not written by embed-dataset; choose an empty one")


def _write_plan(out: Path, files: list[Path], block_rows: int, opts: EmbedOptions) -> None:
    """Records what the parts are made of; a rerun with other inputs or options is refused."""
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


def _worker_error(e: Exception) -> str:
    cause = getattr(e, "cause", None)
    if isinstance(cause, BitnetOnnxError):
        return str(cause)
    text = str(e)
    for line in reversed(text.splitlines()):
        if "BitnetOnnxError:" in line:
            return line.split("BitnetOnnxError:", 1)[1].strip()
    return f"embedding job failed: {text.splitlines()[0] if text else type(e).__name__}"
