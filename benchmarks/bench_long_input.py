"""Peak memory of one 32768-token text on the default exports (HF folder and GGUF, each architecture).

    python benchmarks/bench_long_input.py [--tokens 32768] [--threads 2]

Builds random-weight standard models of the real width and vocabulary with as few layers as hold each
layer kind (Qwen3-0.6B: 1; Gemma3-270M: 2, one sliding and one full), exports each HF folder and its f32
GGUF with the defaults, then runs ``bitnet-onnx embed`` on one text of ``--tokens`` tokens in a child
process per export and prints its peak RSS (the child's ru_maxrss), its wall time, the attention the
export chose and the cost model's estimate of the run's activations (``Manifest.batch_bytes``) next to
what the stock attention would need for the same text.
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
from bitnet_onnx.export.exporter import export
from bitnet_onnx.export.memory import one_text_bytes
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.testing import make_model
from bitnet_onnx.weights import open_source

FEW_LAYERS = {"qwen3": {"layers": 1}, "gemma3": {"layers": 2, "sliding_window_pattern": 2}}
GIB = 1 << 30


def exports(root: Path, arch: str) -> tuple[Path, dict[str, Path]]:
    model = make_model(root / f"{arch}-model", arch, bitnet=False, shape=REAL_SHAPES[arch].name, **FEW_LAYERS[arch])
    gguf = convert(model, root / f"{arch}.gguf", outtype="f32", pre_tokenizer="qwen2" if arch == "qwen3" else None,
                   progress=False)
    return model, {"HF folder": export(model, root / f"{arch}-hf"), "GGUF": export(gguf, root / f"{arch}-gguf")}


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    print(f"# {cpu_name()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; one text of {args.tokens} tokens")
    print("| model | source | weights | attention | max_length | peak RSS | seconds | cost model | stock attention would need |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-long-") as tmp:
        root = Path(tmp)
        text_file = root / "long.txt"  # more words than tokens: truncated to max_length
        text_file.write_text(" ".join(f"word{i % 997} and more" for i in range(args.tokens)) + "\n", encoding="utf-8")
        for arch in ARCHITECTURES:
            model, folders = exports(root, arch)
            cfg = open_source(model).cfg
            for source, folder in folders.items():
                m = Manifest.read(folder)
                rss, seconds = embed_peak(folder, text_file, args.threads)
                print(f"| {REAL_SHAPES[arch].name} ({cfg.n_layers} layer{'s' * (cfg.n_layers > 1)}) | {source} | "
                      f"{m.weights} | {m.attention} | {m.max_length} | {rss:.0f} MB | {seconds:.1f} | "
                      f"{m.batch_bytes(1, args.tokens) / GIB:.2f} GiB | {one_text_bytes(cfg, 'onnx', args.tokens) / GIB:.0f} GiB |",
                      flush=True)


if __name__ == "__main__":
    main()
