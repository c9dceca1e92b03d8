"""``bitnet-onnx convert-gguf``: HF folder -> GGUF."""

from __future__ import annotations

import argparse
import logging

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.convert_gguf.writer import OUTTYPES

EPILOG = """\
examples:
  bitnet-onnx convert-gguf ./bitnet-embeddings-0.6b --outtype i2_s --outfile model-i2_s.gguf
  bitnet-onnx convert-gguf ./tiny-model --outtype f16 --pre-tokenizer qwen2
  python -m bitnet_onnx convert-gguf ./bitnet-embeddings-270m --outtype i2_s

i2_s: projections as ternary I2_S (type 36), embeddings and norms f16 (bitnet.cpp's layout);
f16: 2-D weights and norms f16; f32: everything f32. Gemma3's own norms are stored as w + 1.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("model", metavar="MODEL_DIR", help="HF model folder (config.json, model.safetensors, tokenizer.json)")
    parser.add_argument("--outtype", choices=OUTTYPES, default="f16", help="tensor storage (default: f16)")
    parser.add_argument("--outfile", default=None,
                        help="output GGUF path (default: MODEL_DIR/<folder name>-<outtype>.gguf)")
    parser.add_argument("--arch", choices=sorted(ARCHITECTURES), default=None,
                        help="assert the architecture (default: from config.json model_type)")
    parser.add_argument("--pre-tokenizer", default=None, metavar="NAME",
                        help="llama.cpp pre-tokenizer name when the tokenizer's hash is not recognized (e.g. qwen2)")
    parser.add_argument("--verbose", action="store_true", help="log each step")


def run(args: argparse.Namespace) -> int:
    from bitnet_onnx.convert_gguf.writer import convert

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s: %(message)s")
    out = convert(args.model, args.outfile, args.outtype, arch=args.arch, pre_tokenizer=args.pre_tokenizer)
    print(out)
    return 0

