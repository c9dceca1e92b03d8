"""The ``bitnet-onnx`` command: a table of verbs, each a module with ``add_arguments`` and ``run``.

Verb modules are imported only when their verb runs, so ``bitnet-onnx --help`` stays fast and a
verb's heavy imports (onnx, torch) never slow the others.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import Terminated, exit_cleanly_on_termination, received_signal
from bitnet_onnx.version import __version__

# verb -> (module, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "demo": ("bitnet_onnx.commands.demo", "build tiny BitNet models, export, embed, verify and bench them"),
    "export": ("bitnet_onnx.commands.export", "export a HF model folder to an ONNX folder"),
    "verify": ("bitnet_onnx.commands.verify", "compare an exported folder with the PyTorch reference"),
    "embed": ("bitnet_onnx.commands.embed", "embed texts with an exported folder"),
    "calibrate": ("bitnet_onnx.commands.calibrate", "compute int8/uint8 calibration ranges from texts, kept beside the export"),
    "serve": ("bitnet_onnx.commands.serve", "serve an exported folder over HTTP (OpenAI / TEI embeddings API)"),
    "embed-dataset": ("bitnet_onnx.commands.embed_dataset", "embed a Parquet/JSONL corpus with Ray Data, resumably"),
    "bench": ("bitnet_onnx.commands.bench", "benchmark the i2s export against ORT baselines"),
    "convert-gguf": ("bitnet_onnx.commands.convert_gguf", "convert a HF model folder to GGUF (f32, f16, i2_s)"),
    "inspect": ("bitnet_onnx.commands.inspect", "print a GGUF file's metadata and tensors, or an export's facts and what runs it on this host"),
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
    """Runs one verb; its errors become one line on stderr (exit 1); Ctrl-C (exit 130), SIGTERM and
    SIGHUP (128 + signal) one line saying so. Never a traceback, and every temp output is removed
    on the way out. The handlers cover the whole run, the verb's imports (seconds for torch or onnx)
    included."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        with exit_cleanly_on_termination():  # SIGTERM/SIGHUP remove temp outputs like Ctrl-C
            return _run_verb(argv)
    except BaseException as e:
        signum = received_signal()  # whatever the signal's exception became on its way up
        if isinstance(e, KeyboardInterrupt):
            signum = signum or signal.SIGINT
        elif isinstance(e, Terminated):
            signum = signum or e.code - 128
        if signum is not None:
            return interrupted(argv, signal.Signals(signum).name, 130 if signum == signal.SIGINT else 128 + signum)
        if isinstance(e, BitnetOnnxError):
            return _error(argv, str(e))
        if isinstance(e, OSError):  # unreadable inputs, full disks, folders where files belong, ...
            return _error(argv, describe_os_error(e))
        raise


def _verb(argv: list[str]) -> str | None:
    """The verb argv names (build_parser's rule), if it is one."""
    verb = next((a for a in argv if not a.startswith("-")), None)
    return verb if verb in VERBS else None


def _error(argv: list[str], message: str) -> int:
    print(f"bitnet-onnx {_verb(argv)}: error: {message}", file=sys.stderr)
    return 1


def interrupted(argv: list[str], signal_name: str, status: int) -> int:
    """The one line of a run stopped by a signal; its exit status."""
    verb = _verb(argv)
    try:
        print(f"bitnet-onnx{' ' + verb if verb else ''}: interrupted by {signal_name}", file=sys.stderr)
    except (OSError, ValueError):  # stderr closed or gone: the status still tells
        pass
    return status


def _run_verb(argv: list[str]) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not args.verb:
        parser.print_help()
        return 2
    module = importlib.import_module(VERBS[args.verb][0])
    return int(module.run(args) or 0)


def describe_os_error(e: OSError) -> str:
    """``path: reason`` (one line) for an OSError, e.g. "model/config.json: Is a directory"."""
    reason = e.strerror or str(e) or type(e).__name__
    return f"{e.filename}: {reason}" if e.filename is not None else reason
