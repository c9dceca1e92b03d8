"""``bitnet-onnx export``: HF model folder or GGUF file -> ONNX folder (model.onnx, tokenizer, bitnet_onnx.json)."""

from __future__ import annotations

import argparse
import logging

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.customops.encoder_attention import PRECISIONS
from bitnet_onnx.export import attention
from bitnet_onnx.export.hf_layout import LAYOUTS
from bitnet_onnx.formats import FORMATS, NAMES
from bitnet_onnx.precision import FLOAT32, NAMES as PRECISION_NAMES
from bitnet_onnx.st_modules import POOLINGS

EPILOG = """examples:
  bitnet-onnx export ./bitnet-qwen3-embedding -o ./qwen3-onnx
  bitnet-onnx export ./bitnet-qwen3-embedding -o ./qwen3-onnx --text-input   # + model_text.onnx: strings in
  bitnet-onnx export --arch gemma3 ./bitnet-gemma3 -o ./gemma3-int8 --weights int8
  bitnet-onnx export ./Qwen3-Embedding-0.6B -o ./qwen3-tern --ternarize   # standard model, speed stand-in
  bitnet-onnx export ./bitnet-qwen3-i2_s.gguf -o ./qwen3-onnx               # GGUF: I2_S codes carried as they are
  bitnet-onnx export ./gemma-3-270m-q4_k_m.gguf -o ./gemma3-f32 --pooling mean   # llama.cpp quants dequantized
  bitnet-onnx export ./bitnet-qwen3-embedding -o ./qwen3-ubin --output-precision ubinary   # packed bits out
  bitnet-onnx export ./bitnet-qwen3-embedding -o ./qwen3-i8 --output-precision int8 --output-ranges ./qwen3-onnx/calibration_ranges.json

weights: i2s (default for BitNet; I2STernaryMatMul, needs the op library), f32/f16 (plain MatMul;
for BitNet models the fake-quant reference s_w*T with the per-projection norm, float activations),
int8 (ORT-native: per-token int8 activations x exact ternary int8 weights, MatMulInteger),
nbits (ORT-native MatMulNBits holding the exact ternary values, --nbits 2 or 4)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = EPILOG
    p.add_argument("model_dir", metavar="MODEL_DIR", help="HF model folder (config.json, model.safetensors, tokenizer) or a GGUF file")
    p.add_argument("-o", "--output", required=True, metavar="OUT_DIR", help="folder to create")
    p.add_argument("--arch", choices=sorted(ARCHITECTURES), help="assert the architecture config.json (or the GGUF) names")
    p.add_argument("--weights", choices=NAMES, help="projection weights (default: i2s for BitNet, f32 otherwise)")
    p.add_argument("--nbits", type=int, choices=FORMATS["nbits"].bits, default=4, help="bits for --weights nbits (default 4)")
    p.add_argument("--ternarize", action="store_true",
                   help="standard model: absmean-ternarize the projections (unit norms) as a speed stand-in")
    p.add_argument("--attention", choices=list(attention.STRATEGIES),
                   help="attention core: onnx = stock ONNX ops; ort = ONNX Runtime's GroupQueryAttention / "
                        "MultiHeadAttention (no S x S tensors, no op library); fused = our EncoderAttention (needs the "
                        "op library; the i2s default). Default: the variant's, or ort where its S x S tensors would "
                        "not fit max_length in memory (docs/attention.md)")
    p.add_argument("--attention-precision", choices=list(PRECISIONS),
                   help=f"what the fused attention op's q.k and p.v multiply: bf16 = operands rounded to bfloat16, "
                        f"float32 sums and softmax; auto = the op library picks on the host that runs the model "
                        f"(bf16 where its bf16 path is faster than f32: AMX-BF16; else f32) (default "
                        f"{attention.DEFAULT_PRECISION} with --attention fused; docs/attention.md)")
    p.add_argument("--pooling", choices=POOLINGS,
                   help="pooling for a model that names none (no 1_Pooling module, no GGUF pooling_type)")
    p.add_argument("--text-input", action="store_true",
                   help="also write model_text.onnx: texts in, the tokenizer in the graph (needs onnxruntime-extensions)")
    p.add_argument("--layout", choices=LAYOUTS, default="bitnet",
                   help="hf: also the sentence-transformers / optimum / fastembed files (docs/integrations.md)")
    p.add_argument("--output-precision", default=FLOAT32, metavar="|".join(PRECISION_NAMES),
                   help="sentence_embedding quantized in the graph: int8/uint8 [batch, dim] by --output-ranges, "
                        "binary (int8)/ubinary (uint8) packed sign bits [batch, dim/8] (default float32; docs/precision.md)")
    p.add_argument("--output-ranges", metavar="FILE",
                   help="calibration ranges for int8/uint8 (a 'bitnet-onnx calibrate' file of a float32 export, or .npy [2, dim])")
    p.add_argument("--overwrite", action="store_true", help="replace OUT_DIR if it exists")


def run(args: argparse.Namespace) -> int:
    from bitnet_onnx.export.exporter import export

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = export(args.model_dir, args.output, arch=args.arch, weights=args.weights, bits=args.nbits,
                 ternarize=args.ternarize, overwrite=args.overwrite, attention_name=args.attention,
                 pooling=args.pooling, text_input=args.text_input, layout=args.layout,
                 output_precision=args.output_precision, output_ranges=args.output_ranges,
                 attention_precision=args.attention_precision)
    print(out)
    return 0
