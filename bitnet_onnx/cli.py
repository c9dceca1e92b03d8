"""The ``bitnet-onnx`` command: a table of verbs, each a module with ``add_arguments`` and ``run``.

Verb modules are imported only when their verb runs, so ``bitnet-onnx --help`` stays fast and a
verb's heavy imports (onnx, torch) never slow the others.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from bitnet_onnx import __version__
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import exit_cleanly_on_termination

# verb -> (module, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "demo": ("bitnet_onnx.commands.demo", "build tiny BitNet models, export, embed, verify and bench them"),
    "export": ("bitnet_onnx.commands.export", "export a HF model folder to an ONNX folder"),
    "verify": ("bitnet_onnx.commands.verify", "compare an exported folder with the PyTorch reference"),
    "embed": ("bitnet_onnx.commands.embed", "embed texts with an exported folder"),
    "serve": ("bitnet_onnx.commands.serve", "serve an exported folder over HTTP (OpenAI / TEI embeddings API)"),
    "embed-dataset": ("bitnet_onnx.commands.embed_dataset", "embed a Parquet/JSONL corpus with Ray Data, resumably"),
    "bench": ("bitnet_onnx.commands.bench", "benchmark the i2s export against ORT baselines"),
    "convert-gguf": ("bitnet_onnx.commands.convert_gguf", "convert a HF model folder to GGUF (f32, f16, i2_s)"),
    "inspect": ("bitnet_onnx.commands.inspect", "print a GGUF file's metadata and tensor table"),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bitnet-onnx", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"bitnet-onnx {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for verb, (module, help_text) in VERBS.items():
        p = sub.add_parser(verb, help=help_text, description=help_text,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if verb == chosen:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not args.verb:
        parser.print_help()
        return 2
    module = importlib.import_module(VERBS[args.verb][0])
    try:
        with exit_cleanly_on_termination():  # SIGTERM/SIGHUP remove temp outputs like Ctrl-C
            return int(module.run(args) or 0)
    except BitnetOnnxError as e:
        print(f"bitnet-onnx {args.verb}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # unreadable inputs, full disks, folders where files belong, symlink loops, ...
        print(f"bitnet-onnx {args.verb}: error: {describe_os_error(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def describe_os_error(e: OSError) -> str:
    """``path: reason`` (one line) for an OSError, e.g. "model/config.json: Is a directory"."""
    reason = e.strerror or str(e) or type(e).__name__
    return f"{e.filename}: {reason}" if e.filename is not None else reason
