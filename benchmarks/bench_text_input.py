"""Strings in vs ids in: the cost of tokenizing inside the graph (export --text-input).

For each architecture, one random-weight BitNet model of the real shape is exported once (i2s,
--text-input: the folder holds both model.onnx and model_text.onnx) and three paths are timed on
the same texts, 1 thread, interleaved repetitions (medians):

- ids in: model.onnx on token ids made beforehand (the model alone);
- Python tokenizer + ids in: TextTokenizer.encode (the ``tokenizers`` library and the manifest's
  rules, what Embedder does) then model.onnx;
- strings in: model_text.onnx on the texts (tokenizer, rules and model in one ORT run);
and the tokenizing alone: the pre-processing graph of model_text.onnx by itself (export/text_input.py)
and TextTokenizer.encode, in ms per batch.

Every text has exactly the cell's number of tokens. Both carry their real tokenizers
(bitnet_onnx.testing.real_tokenizers): Qwen3's runs NormalizeNFC + onnxruntime-extensions'
HfJsonTokenizer in the graph, Gemma3's our ByteFallbackBpe.

    python benchmarks/bench_text_input.py [--reps 5] [--cells 1x16,16x128] [--arch qwen3,gemma3]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import ARCHITECTURES, REAL_SHAPES
from bitnet_onnx.bench.cache import build_atomically, cache_dir, code_hash
from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.bench.runners import text_of_tokens
from bitnet_onnx.bench.timing import interleave
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.session import SENTENCE_OUTPUT, create_session
from bitnet_onnx.runtime.tokenization import TextTokenizer

SHAPES = {arch: real.name for arch, real in REAL_SHAPES.items()}  # arch -> its released model's shape
PATHS = ("ids in", "tokenizer + ids in", "strings in", "graph tokenizer", "Python tokenizer")
PROSE = ("Ternary weights take the values minus one, zero and plus one, so a matrix product needs only "
         "additions and subtractions. Search engines embed queries and documents into one vector space "
         "and rank passages by cosine similarity; café, naïve and 東京 appear too. ")


def export_folder(arch: str, cache: Path) -> Path:
    from bitnet_onnx.export.exporter import export
    from bitnet_onnx.testing import make_model
    from bitnet_onnx.testing.real_tokenizers import real_tokenizer_dir

    folder = cache / "bench-text-input" / f"{arch}-{code_hash('bitnet_onnx.export', 'bitnet_onnx.testing')}"
    if (folder / "onnx" / "bitnet_onnx.json").is_file():
        return folder / "onnx"

    def build(tmp: Path) -> None:
        model = make_model(tmp / "model", arch, bitnet=True, seed=0, shape=SHAPES[arch],
                           tokenizer=real_tokenizer_dir(arch))
        export(model, tmp / "onnx", text_input=True)

    print(f"exporting a random-weight {SHAPES[arch]} (i2s, --text-input) into {folder} ...", flush=True)
    return build_atomically(folder, build) / "onnx"


def preprocess_session(folder: Path, manifest: Manifest, threads: int):
    """The pre-processing graph of model_text.onnx alone (texts -> input_ids, attention_mask)."""
    import onnxruntime as ort

    from bitnet_onnx import customops
    from bitnet_onnx.export.text_input import preprocess_model

    pre = preprocess_model(folder, manifest, 21, 10)
    options = customops.session_options(threads=threads, extensions=manifest.text_needs_extensions)
    options.log_severity_level = 3
    return ort.InferenceSession(pre.SerializeToString(), options, providers=["CPUExecutionProvider"])


def texts_of(tokenizer: TextTokenizer, count: int, tokens: int) -> list[str]:
    """``count`` different texts of exactly ``tokens`` tokens each (the manifest's rules included)."""
    out, start = [], 0
    while len(out) < count:
        text = text_of_tokens(tokenizer, tokens, PROSE, start)
        if len(tokenizer.tokenize([text])[0]) == tokens:
            out.append(text)
        start += 7
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--cells", default="1x16,16x128", help="BATCHxTOKENS,...")
    p.add_argument("--arch", default=",".join(ARCHITECTURES))
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    cells = [tuple(int(x) for x in c.split("x")) for c in args.cells.split(",")]
    print(f"# {cpu_name()}, {datetime.date.today()}, {args.threads} thread(s), {args.reps} interleaved repetitions")
    print("| model | batch x tokens | ids in, tok/s | tokenizer + ids in, tok/s | strings in, tok/s | "
          "strings in / ids in | strings in / tokenizer + ids in | graph tokenizer, ms | Python tokenizer, ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arch in args.arch.split(","):
        folder = export_folder(arch, cache_dir())
        manifest = Manifest.read(folder)
        tokenizer = TextTokenizer.from_folder(folder)
        ids_session = create_session(folder, manifest, threads=args.threads)
        text_session = create_session(folder, manifest, threads=args.threads, text=True)
        pre_session = preprocess_session(folder, manifest, args.threads)
        inputs = {cell: texts_of(tokenizer, *cell) for cell in cells}
        encoded = {cell: tokenizer.encode(texts) for cell, texts in inputs.items()}

        def run(path: str, cell) -> float:
            texts = inputs[cell]
            start = time.perf_counter()
            if path == "strings in":
                text_session.run([SENTENCE_OUTPUT], {"text": np.array(texts, dtype=object)})
            elif path == "graph tokenizer":
                pre_session.run(None, {"text": np.array(texts, dtype=object)})
            elif path == "Python tokenizer":
                tokenizer.encode(texts)
            else:
                ids, mask = encoded[cell] if path == "ids in" else tokenizer.encode(texts)
                ids_session.run([SENTENCE_OUTPUT], {"input_ids": ids, "attention_mask": mask})
            return time.perf_counter() - start

        times = interleave(PATHS, cells, args.reps, run, warm_up=lambda cell: True)
        for cell in cells:
            tokens = cell[0] * cell[1]
            rate = {path: tokens / statistics.median(times[(path, cell)]) for path in PATHS}
            ms = {path: statistics.median(times[(path, cell)]) * 1000 for path in PATHS}
            print(f"| {SHAPES[arch]} | {cell[0]} x {cell[1]} | {rate['ids in']:.0f} | {rate['tokenizer + ids in']:.0f} | "
                  f"{rate['strings in']:.0f} | {rate['strings in'] / rate['ids in']:.3f} | "
                  f"{rate['strings in'] / rate['tokenizer + ids in']:.3f} | {ms['graph tokenizer']:.2f} | "
                  f"{ms['Python tokenizer']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
