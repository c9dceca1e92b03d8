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
corpus size. Here: the options, the actors and the public calls; the blocks in ``blocks.py``, the output
folder in ``parts.py``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import atomic_file

from bitnet_onnx.runtime.dataset.blocks import Block, input_files, plan_blocks, read_block
from bitnet_onnx.runtime.dataset.parts import (EMBEDDING, SUCCESS, TOKENS, check_output_dir, embedding_column,
                                               read_output, write_part, write_plan)

__all__ = ["EmbedOptions", "JobSummary", "embed_dataset", "read_output", "run_job"]


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
            texts, ids = read_block(block, self.opts.text_column, self.opts.id_column)
            vectors, counts = self.embed(texts)
            write_part(self.output_dir / block.part_name, ids, vectors, counts, self.opts.precision)
            out["part"].append(block.part_name)
            out["texts"].append(len(texts))
            out["tokens"].append(int(counts.sum()))
            out["seconds"].append(time.perf_counter() - start)
        return out


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
    if opts.prompt_name is not None and opts.prompt_name not in manifest.prompts:
        raise BitnetOnnxError(f"--prompt-name {opts.prompt_name!r} is not one of the export's prompts "
                              f"({', '.join(manifest.prompts) or 'none'})")
    opts = opts.with_ranges(export_dir, ranges)  # the dimensions and precision, by the Embedder's rules
    files = input_files(inputs)
    out = Path(output_dir)
    check_output_dir(out, files, export_dir)
    blocks = plan_blocks(files, block_rows, opts.text_column)
    write_plan(out, files, block_rows, opts)
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


def _worker_error(e: Exception) -> str:
    cause = getattr(e, "cause", None)
    if isinstance(cause, BitnetOnnxError):
        return str(cause)
    text = str(e)
    for line in reversed(text.splitlines()):
        if "BitnetOnnxError:" in line:
            return line.split("BitnetOnnxError:", 1)[1].strip()
    return f"embedding job failed: {text.splitlines()[0] if text else type(e).__name__}"
