"""``bitnet-onnx inspect FILE.gguf``: metadata and tensor table of a GGUF file, I2_S included."""

from __future__ import annotations

import argparse

EPILOG = """\
example:
  bitnet-onnx inspect model-i2_s.gguf
  bitnet-onnx inspect model-i2_s.gguf --all   # print long arrays (the vocabulary) in full
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("file", metavar="FILE.gguf", help="GGUF file to describe")
    parser.add_argument("--all", action="store_true", help="print arrays in full")


def run(args: argparse.Namespace) -> int:
    from bitnet_onnx.convert_gguf.inspect import describe

    print(describe(args.file, full=args.all))
    return 0
