"""``bitnet-onnx calibrate``: int8 / uint8 calibration ranges from texts, computed once and kept in a small
file beside the export (OUT_DIR/calibration_ranges.json), which embed, serve, embed-dataset and
Embedder then use."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import check_apart
from bitnet_onnx.precision import CALIBRATION_FILE

EPILOG = f"""\
examples:
  bitnet-onnx calibrate out/ --input corpus-sample.txt                      # -> out/{CALIBRATION_FILE}
  bitnet-onnx calibrate out/ --input docs.jsonl --dimensions 1024,256 --prompt-name document
  bitnet-onnx calibrate out/ --input docs.txt --output ranges.json          # kept elsewhere: --ranges FILE

Embeds the texts (same input rules as 'embed': text lines, or JSONL with a "text" field) and keeps
each dimension's minimum and maximum per width (sentence-transformers' calibration ranges). A few
thousand texts like the ones you will store are plenty. Widths already in the file are kept, the
ones given are replaced. int8 / uint8 then scale by them: embed --precision int8, serve's
output_dtype, embed-dataset --precision, export --output-ranges.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("out_dir", metavar="OUT_DIR", help="a float32 folder written by 'bitnet-onnx export'")
    p.add_argument("--input", "-i", metavar="FILE", required=True,
                   help="calibration texts (text lines or JSONL); '-' for stdin")
    p.add_argument("--output", "-o", metavar="FILE", help=f"the ranges file (default OUT_DIR/{CALIBRATION_FILE})")
    p.add_argument("--dimensions", metavar="N[,N...]",
                   help="widths to calibrate (Matryoshka; default: the full dimension)")
    p.add_argument("--prompt-name", metavar="NAME", help="a prompt of the folder's manifest, e.g. document")
    p.add_argument("--prompt", metavar="TEXT", help="a literal prefix put before every text")
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="texts per batch (default 32)")
    p.add_argument("--threads", type=int, metavar="N", help="ONNX Runtime intra-op threads (default: all cores)")


def _widths(text: str | None) -> list[int | None]:
    if text is None:
        return [None]
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise BitnetOnnxError(f"--dimensions {text!r}: expected integers separated by commas, e.g. 1024,256") from None


def run(args: argparse.Namespace) -> int:
    from bitnet_onnx.commands.embed import read_input
    from bitnet_onnx.runtime.embedder import Embedder

    widths = _widths(args.dimensions)
    output = Path(args.output) if args.output else Path(args.out_dir) / CALIBRATION_FILE
    if output.suffix.lower() != ".json":
        raise BitnetOnnxError(f"--output {output}: a calibration file is .json")
    if args.output:
        check_apart(output, [args.out_dir] + ([args.input] if args.input != "-" else []), "--output")
    texts = [r["text"] for r in read_input(args.input)]
    embedder = Embedder(args.out_dir, threads=args.threads)
    table = embedder.calibrate(texts, dimensions=widths, path=output, batch_size=args.batch_size,
                               prompt_name=args.prompt_name, prompt=args.prompt)
    print(f"bitnet-onnx calibrate: ranges of width {', '.join(map(str, table))} from {len(texts)} texts -> {output}",
          file=sys.stderr)
    return 0
