"""``bitnet-onnx embed-dataset``: a corpus (Parquet or JSONL) -> Parquet embeddings with Ray Data, resumable."""

from __future__ import annotations

import argparse
import importlib.util

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.precision import FLOAT32, NAMES as PRECISION_NAMES

EPILOG = """\
examples:
  bitnet-onnx embed-dataset ./qwen3-onnx corpus/ embeddings/                  # local Ray cluster
  bitnet-onnx embed-dataset ./qwen3-onnx 'data/*.jsonl' out/ --workers 2 --threads-per-worker 1
  bitnet-onnx embed-dataset ./qwen3-onnx s3data.parquet out/ --ray-address auto   # an existing cluster

  bitnet-onnx embed-dataset ./qwen3-onnx corpus/ bits/ --precision ubinary --dimensions 512

INPUT: a .parquet or .jsonl file, a folder of them, or a glob. OUTPUT_DIR gets one Parquet part per
input block (columns id, embedding, token_count) and _SUCCESS when complete. embedding by --precision:
a fixed-size list of float32 (default), int8 or uint8 [dim] (scaled by --ranges, else
EXPORT_DIR/calibration_ranges.json), binary: int8 [dim/8], ubinary: fixed-size binary of dim/8 bytes. Rerunning after an interruption embeds only the blocks whose part is missing.
Needs Ray: pip install 'bitnet-onnx[ray]'.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("export_dir", metavar="EXPORT_DIR", help="a folder written by 'bitnet-onnx export'")
    p.add_argument("input", metavar="INPUT", help="Parquet/JSONL file, folder or glob")
    p.add_argument("output_dir", metavar="OUTPUT_DIR", help="folder for the Parquet parts")
    p.add_argument("--text-column", default="text", help="column (JSONL: field) holding the texts (default: text)")
    p.add_argument("--id-column", default="id",
                   help="column copied to the output as id (default: id; absent: '<file name>:<row>')")
    p.add_argument("--ray-address", metavar="auto|HOST:PORT",
                   help="an existing Ray cluster (default: start a local one on this machine)")
    p.add_argument("--workers", type=int, default=1, help="actors, one ONNX Runtime session each (default 1)")
    p.add_argument("--threads-per-worker", type=int, default=1, help="intra-op threads per actor (default 1)")
    p.add_argument("--batch-size", type=int, default=32, help="texts per inference batch (default 32)")
    p.add_argument("--block-rows", type=int, default=4096,
                   help="rows per block, the unit of work, output and resumption (default 4096)")
    p.add_argument("--prompt-name", metavar="NAME", help="a prompt of the export's manifest, e.g. document")
    p.add_argument("--dimensions", type=int, help="keep the first N values (Matryoshka)")
    p.add_argument("--precision", default=FLOAT32, metavar="|".join(PRECISION_NAMES),
                   help="float32 (default), int8, uint8, binary or ubinary (docs/precision.md)")
    p.add_argument("--ranges", metavar="FILE", help="calibration ranges for int8/uint8 ('bitnet-onnx calibrate')")


def run(args: argparse.Namespace) -> int:
    for name in ("workers", "threads_per_worker", "batch_size", "block_rows"):
        if getattr(args, name) < 1:
            raise BitnetOnnxError(f"--{name.replace('_', '-')} must be >= 1")
    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("pyarrow") is None:
        raise BitnetOnnxError("embed-dataset needs Ray: pip install 'bitnet-onnx[ray]'")
    from bitnet_onnx.runtime.dataset import EmbedOptions, run_job
    opts = EmbedOptions(text_column=args.text_column, id_column=args.id_column, prompt_name=args.prompt_name,
                        dimensions=args.dimensions, batch_size=args.batch_size,
                        threads_per_worker=args.threads_per_worker, precision=args.precision)
    s = run_job(args.export_dir, args.input, args.output_dir, opts, workers=args.workers,
                block_rows=args.block_rows, ray_address=args.ray_address, ranges=args.ranges)
    print(f"embed-dataset: {s.blocks} blocks ({s.skipped} already done), {s.texts} texts, {s.tokens} tokens "
          f"in {s.seconds:.1f} s ({s.tokens_per_second:.0f} tokens/s) -> {args.output_dir}")
    return 0
