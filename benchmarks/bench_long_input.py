"""Peak memory of one 32768-token text on the default exports (HF folder and GGUF, each architecture).

    python benchmarks/bench_long_input.py [--tokens 32768] [--threads 2]
    python benchmarks/bench_long_input.py --bitnet --weights int8 --attention fused   # one export's options

Builds random-weight models of the real width and vocabulary with as few layers as hold each layer kind
(Qwen3-0.6B: 1; Gemma3-270M: 2, one sliding and one full), standard ones or, with ``--bitnet``, BitNet
ones; exports each HF folder and its f32 GGUF with the defaults or the ``--weights`` /
``--attention`` / ``--attention-precision`` given (``bitnet-onnx export``'s options), then runs
``bitnet-onnx embed`` on one text of ``--tokens`` tokens in a child process per export and prints its peak
RSS (the child's ru_maxrss), its wall time, the attention the export chose (and its precision) and the
cost model's estimate of the run's activations (``Manifest.batch_bytes``) next to what the stock attention
would need for the same text. The children inherit the environment (``BITNET_ONNX_ATTENTION_PRECISION``,
``BITNET_ONNX_ISA``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bitnet_onnx.arch import ARCHITECTURES, REAL_SHAPES
from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.convert_gguf.writer import convert
from bitnet_onnx.customops.encoder_attention import PRECISIONS
from bitnet_onnx.export.attention import STRATEGIES
from bitnet_onnx.export.exporter import export
from bitnet_onnx.formats import NAMES as WEIGHT_NAMES
from bitnet_onnx.export.memory import one_text_bytes
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.testing import make_model
from bitnet_onnx.weights import open_source

FEW_LAYERS = {"qwen3": {"layers": 1}, "gemma3": {"layers": 2, "sliding_window_pattern": 2}}
GIB = 1 << 30


def exports(root: Path, arch: str, bitnet: bool, options: dict) -> tuple[Path, dict[str, Path]]:
    """The model folder, and {"HF folder": its export, "GGUF": the export of its f32 GGUF} with ``options``
    (``export``'s weights / attention_name / attention_precision; absent: the defaults)."""
    model = make_model(root / f"{arch}-model", arch, bitnet=bitnet, shape=REAL_SHAPES[arch].name, **FEW_LAYERS[arch])
    gguf = convert(model, root / f"{arch}.gguf", outtype="f32", pre_tokenizer="qwen2" if arch == "qwen3" else None,
                   progress=False)
    return model, {"HF folder": export(model, root / f"{arch}-hf", **options),
                   "GGUF": export(gguf, root / f"{arch}-gguf", **options)}


def embed_peak(folder: Path, text_file: Path, threads: int) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of ``bitnet-onnx embed`` on the file's text, in a child process."""
    cmd = [sys.executable, "-m", "bitnet_onnx", "embed", str(folder), "--input", str(text_file),
           "--output", str(text_file.with_suffix(".npy")), "--threads", str(threads), "--quiet"]
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed")
    return usage.ru_maxrss / 1024, time.perf_counter() - start


def _attention(m: Manifest) -> str:
    """The export's attention, with the fused op's precision (auto: resolved by the op library at run time)."""
    return f"{m.attention} ({m.attention_precision})" if m.attention == "fused" else m.attention


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bitnet", action="store_true", help="BitNet models (default: standard ones)")
    p.add_argument("--weights", choices=WEIGHT_NAMES, help="export's --weights (default: the export's)")
    p.add_argument("--attention", choices=list(STRATEGIES), help="export's --attention (default: the export's)")
    p.add_argument("--attention-precision", choices=list(PRECISIONS), help="export's --attention-precision")
    args = p.parse_args()
    options = {key: value for key, value in (("weights", args.weights), ("attention_name", args.attention),
                                             ("attention_precision", args.attention_precision)) if value is not None}
    forced = {k: v for k, v in os.environ.items() if k.startswith("BITNET_ONNX_")}
    print(f"# {cpu_name()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; one text of {args.tokens} tokens; "
          f"{'BitNet' if args.bitnet else 'standard'} models; export options {options or 'the defaults'}; "
          f"environment {forced or 'unset'}")
    print("| model | source | weights | attention | max_length | peak RSS | seconds | cost model | stock attention would need |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-long-") as tmp:
        root = Path(tmp)
        text_file = root / "long.txt"  # more words than tokens: truncated to max_length
        text_file.write_text(" ".join(f"word{i % 997} and more" for i in range(args.tokens)) + "\n", encoding="utf-8")
        for arch in ARCHITECTURES:
            model, folders = exports(root, arch, args.bitnet, options)
            cfg = open_source(model).cfg
            for source, folder in folders.items():
                m = Manifest.read(folder)
                rss, seconds = embed_peak(folder, text_file, args.threads)
                print(f"| {REAL_SHAPES[arch].name} ({cfg.n_layers} layer{'s' * (cfg.n_layers > 1)}) | {source} | "
                      f"{m.weights} | {_attention(m)} | {m.max_length} | {rss:.0f} MB | {seconds:.1f} | "
                      f"{m.batch_bytes(1, args.tokens) / GIB:.2f} GiB | {one_text_bytes(cfg, 'onnx', args.tokens) / GIB:.0f} GiB |",
                      flush=True)


if __name__ == "__main__":
    main()
