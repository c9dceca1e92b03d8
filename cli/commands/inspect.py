"""``bitnet-onnx inspect FILE.gguf|EXPORT_DIR``: metadata and tensor table of a GGUF file, I2_S included;
or an exported folder's manifest facts and what runs it on this host (op library, kernel ISA, attention precision)."""

from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """\
example:
  bitnet-onnx inspect model-i2_s.gguf
  bitnet-onnx inspect model-i2_s.gguf --all   # print long arrays (the vocabulary) in full
  bitnet-onnx inspect ./qwen3-onnx            # an exported folder: its manifest, and the op library,
                                              # kernel ISA and attention precision a session gets here
  BITNET_ONNX_ISA=avx2 bitnet-onnx inspect ./qwen3-onnx   # the same under a forced kernel ISA
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("path", metavar="FILE.gguf|EXPORT_DIR",
                        help="GGUF file to describe, or a folder written by 'bitnet-onnx export'")
    parser.add_argument("--all", action="store_true", help="print a GGUF file's arrays in full")


def run(args: argparse.Namespace) -> int:
    # A folder is an export (Manifest.read names a missing manifest); anything else goes to the GGUF reader
    # as before, whose checks name a missing path, a FIFO, a symlink loop or a file that is not GGUF.
    if Path(args.path).is_dir():
        from bitnet_onnx.runtime.inspect import describe_export

        print(describe_export(args.path))
    else:
        from bitnet_onnx.convert_gguf.inspect import describe

        print(describe(args.path, full=args.all))
    return 0
