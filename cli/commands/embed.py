"""``bitnet-onnx embed``: embed texts from the command line, a text file or JSONL, to .npy / .jsonl / JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from bitnet_onnx.commands.memory_args import add_batch_memory_argument, batch_memory_bytes
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import atomic_file, check_apart, read_input_file
from bitnet_onnx.precision import FLOAT32, NAMES as PRECISION_NAMES

from bitnet_onnx.runtime.embedder import MAX_BATCH_TOKENS, Embedder

JSONL_SUFFIXES = (".jsonl", ".ndjson")
OUTPUT_SUFFIXES = (".npy", ".jsonl", ".json")

EPILOG = """\
examples:
  bitnet-onnx embed out/ "a cat sat on the mat" "a dog in the fog"   # JSON on stdout
  bitnet-onnx embed out/ --input docs.txt --output docs.npy           # one text per line
  bitnet-onnx embed out/ --input docs.jsonl --output docs.jsonl --prompt-name passage
  cat queries.txt | bitnet-onnx embed out/ --input - --dimensions 256 > queries.json
  bitnet-onnx embed out/ --input docs.txt --output docs.npy --precision ubinary   # packed sign bits
  bitnet-onnx embed out/ --input docs.txt --output docs.npy --precision int8      # out/calibration_ranges.json

--input: a text file (one text per line, blank lines included) or, when named *.jsonl /
*.ndjson, JSON lines with a "text" field; "-" reads text lines from stdin. Both must be UTF-8.
--output by suffix: .npy (float32 [n, dim]), .jsonl (the input record or {"text": ...} plus
"embedding", one line per text), .json (a list of vectors). Without --output: a JSON list of
vectors on stdout, rows in input order.
--precision (sentence-transformers' quantize_embeddings): int8 / uint8 [n, dim] scaled per dimension
by calibration ranges (--ranges FILE, else OUT_DIR/calibration_ranges.json from 'bitnet-onnx
calibrate'); binary (int8) / ubinary (uint8) [n, ceil(dim/8)], the sign bits packed 8 per byte.
.npy gets that dtype; JSON and JSONL lists of integers. --dimensions applies first.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("out_dir", metavar="OUT_DIR", help="a folder written by 'bitnet-onnx export'")
    p.add_argument("texts", metavar="TEXT", nargs="*", help="texts to embed (or use --input)")
    p.add_argument("--input", "-i", metavar="FILE", help="texts from a file (text lines or JSONL); '-' for stdin")
    p.add_argument("--output", "-o", metavar="FILE", help="write .npy, .jsonl or .json instead of JSON on stdout")
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="texts per batch (default 32)")
    p.add_argument("--max-batch-tokens", type=int, default=MAX_BATCH_TOKENS, metavar="N",
                   help=f"cap on texts x padded length per batch (default {MAX_BATCH_TOKENS}): long texts get smaller batches")
    add_batch_memory_argument(p)
    p.add_argument("--prompt-name", metavar="NAME", help="a prompt of the folder's manifest, e.g. query")
    p.add_argument("--prompt", metavar="TEXT", help="a literal prefix put before every text")
    p.add_argument("--dimensions", type=int, metavar="N", help="keep the first N dimensions (Matryoshka), renormalized")
    p.add_argument("--precision", default=FLOAT32, metavar="|".join(PRECISION_NAMES),
                   help="float32 (default), int8, uint8, binary or ubinary (docs/precision.md)")
    p.add_argument("--ranges", metavar="FILE",
                   help="calibration ranges for int8/uint8: a 'bitnet-onnx calibrate' file or .npy [2, dim] "
                        "(default: OUT_DIR/calibration_ranges.json)")
    p.add_argument("--threads", type=int, metavar="N", help="ONNX Runtime intra-op threads (default: all cores)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary on stderr")


def run(args: argparse.Namespace) -> int:
    if args.texts and args.input:
        raise BitnetOnnxError("give texts as arguments or with --input, not both")
    if not args.texts and not args.input:
        raise BitnetOnnxError("no texts: give TEXT arguments or --input FILE")
    output = Path(args.output) if args.output else None
    if output is not None and output.suffix.lower() not in OUTPUT_SUFFIXES:
        raise BitnetOnnxError(f"--output {output}: unknown suffix; use one of {', '.join(OUTPUT_SUFFIXES)}")
    if output is not None:
        check_apart(output, [args.out_dir] + ([args.input] if args.input not in (None, "-") else []), "--output")
    records = read_input(args.input) if args.input else [{"text": t} for t in args.texts]

    embedder = Embedder(args.out_dir, threads=args.threads, max_batch_bytes=batch_memory_bytes(args.max_batch_memory))
    show = not args.quiet and sys.stderr.isatty()
    vectors = embedder.encode([r["text"] for r in records], batch_size=args.batch_size,
                              prompt_name=args.prompt_name, prompt=args.prompt,
                              dimensions=args.dimensions, show_progress_bar=show,
                              max_batch_tokens=args.max_batch_tokens, precision=args.precision,
                              ranges=args.ranges)
    if output is None:
        try:
            _write_json(sys.stdout, vectors)
            sys.stdout.write("\n")
            sys.stdout.flush()
        except BrokenPipeError:  # e.g. `| head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error again at exit
        return 0
    write_output(output, records, vectors)
    if not args.quiet:
        print(f"bitnet-onnx embed: {vectors.shape[0]} x {vectors.shape[1]} {vectors.dtype} -> {output}", file=sys.stderr)
    return 0


def read_input(name: str) -> list[dict]:
    """Records with a "text" field from a text-lines file, a JSONL file or stdin ("-")."""
    if name == "-":
        data, label = sys.stdin.buffer.read(), "<stdin>"
    else:  # a regular file only: a FIFO without a writer would block, a device never end
        data, label = read_input_file(name, "--input"), name
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise BitnetOnnxError(f"{label}: not UTF-8 text (invalid byte 0x{data[e.start]:02x} at offset {e.start})") from None
    if name != "-" and Path(name).suffix.lower() in JSONL_SUFFIXES:
        return _parse_jsonl(text, label)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line, it does not start an empty one
    return [{"text": line.removesuffix("\r")} for line in lines]


def _parse_jsonl(text: str, label: str) -> list[dict]:
    records = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise BitnetOnnxError(f"{label}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise BitnetOnnxError(f"{label}:{n}: expected a JSON object with a string \"text\" field")
        records.append(obj)
    return records


def write_output(path: Path, records: list[dict], vectors: np.ndarray) -> None:
    """All or nothing (bitnet_onnx.io.atomic_file): a failure leaves no partial file."""
    suffix = path.suffix.lower()
    with atomic_file(path, what="--output") as tmp:
        with open(tmp, "wb" if suffix == ".npy" else "w", encoding=None if suffix == ".npy" else "utf-8") as f:
            if suffix == ".npy":
                np.save(f, vectors)
            elif suffix == ".jsonl":
                for record, vec in zip(records, vectors):
                    f.write(json.dumps({**record, "embedding": vec.tolist()}, ensure_ascii=False) + "\n")
            else:
                _write_json(f, vectors)


def _write_json(f, vectors: np.ndarray) -> None:
    json.dump(vectors.tolist(), f)


