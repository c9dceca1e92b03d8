"""What ``bench`` can compare: one row per variant.

A row says how the variant is built from an HF model folder into a new folder, how a bench worker
runs it (a key of ``bitnet_onnx.bench.runners.RUNNERS``) and whether the table gets an "x <name>"
column of tokens/s ratios against it. Ratio columns come in the table's row order. A new variant
(another runtime, another graph form) is one row here, plus a runner when the worker cannot run
it as an ONNX export.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

from bitnet_onnx.bench import llama_cpp
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import FORMATS


@dataclass(frozen=True)
class Variant:
    name: str  # the --variants name and the table's "variant" cell
    build: Callable[[Path, Path], Path]  # (HF model folder, output folder to create) -> the output folder
    runner: str = "onnx"  # how a worker loads and times the built folder
    ratio_base: bool = False  # the table gets an "x <name>" column
    note: str = ""  # what it is, for --variants' help when the name does not say it
    env: tuple[tuple[str, str], ...] = ()  # set in its worker's environment (e.g. a forced kernel family)


def _export(model_dir: Path, out_dir: Path, **options) -> Path:
    from bitnet_onnx.export.exporter import export

    return export(model_dir, out_dir, **options)


def _ort_quantize_dynamic(model_dir: Path, out_dir: Path) -> Path:
    """The f32 export with model.onnx replaced by onnxruntime.quantization.quantize_dynamic's output
    (the projections' MatMuls; attention MatMuls have no constant weight and stay float)."""
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    folder = _export(model_dir, out_dir, weights="f32")
    source, quantized = folder / "model.onnx", folder / "ort_int8.onnx"
    # onnx's shape inference stops at com.microsoft ops (RotaryEmbedding): tensors after them are
    # float. The quantizer logs a warning per such tensor on the root logger: silenced here.
    root = logging.getLogger()
    level, root.level = root.level, logging.ERROR
    try:
        quantize_dynamic(source, quantized, op_types_to_quantize=["MatMul"], use_external_data_format=True,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        root.setLevel(level)
    for stale in folder.glob("model.onnx*"):
        stale.unlink()
    quantized.rename(source)  # its external data file keeps the name recorded inside the model
    return folder


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("i2s", partial(_export, weights="i2s")),
    Variant("i2s-onnx-attn", partial(_export, weights="i2s", attention_name="onnx"), ratio_base=True,
            note="i2s with the stock ONNX attention instead of EncoderAttention (export --attention onnx)"),
    Variant("f32", partial(_export, weights="f32"), ratio_base=True),
    Variant("f16", partial(_export, weights="f16")),
    Variant("int8", partial(_export, weights="int8"), ratio_base=True),
    Variant("nbits", partial(_export, weights="nbits")),  # the exporter's default bits
    *(Variant(f"nbits{bits}", partial(_export, weights="nbits", bits=bits)) for bits in FORMATS["nbits"].bits),
    # What an ORT user does today without bitnet-onnx's variants: quantize_dynamic (defaults: per-tensor
    # int8 weights, dynamic uint8 activations) of the f32 export.
    Variant("ort-int8", _ort_quantize_dynamic, ratio_base=True, note="ORT's quantize_dynamic of the f32 export"),
    # Strings in: the i2s export with --text-input, fed texts of the cell's token count (tokenizer in the graph).
    Variant("i2s-text", partial(_export, weights="i2s", text_input=True), runner="onnx-text",
            note="i2s fed texts, the tokenizer in the graph (export --text-input)"),
    # Upstream llama.cpp (llama-cpp-python, when installed) on convert-gguf's file: bench/llama_cpp.py
    Variant("llama.cpp-f16", llama_cpp.build_f16, runner="llama.cpp",
            note="upstream llama.cpp on convert-gguf's f16 file, without BitNet's per-projection norms"),
    Variant("llama.cpp-tq2_0", partial(llama_cpp.build_quantized, quant="tq2_0"), runner="llama.cpp",
            note="that file quantized by llama.cpp to TQ2_0, its fastest ternary type"),
    # What a user on an Intel server may run instead of ORT: OpenVINO (the openvino extra) on the f32
    # export, at the precision it picks for the CPU. With the stock attention: the default f32 export of a
    # causal model runs com.microsoft GroupQueryAttention, which OpenVINO 2026.4 cannot read without its
    # past_key/past_value inputs.
    Variant("openvino", partial(_export, weights="f32", attention_name="onnx"), runner="openvino",
            note="OpenVINO's CPU runtime at its default precision on the f32 export with the stock attention "
                 "(export --weights f32 --attention onnx; pip install 'bitnet-onnx[openvino]')"),
)}
DEFAULT_VARIANTS = ("i2s", "int8", "ort-int8", "nbits", "f32", "openvino")


FAMILY_PREFIX = "i2s-"  # i2s-<family>: the i2s export with one I2S kernel family forced


def family_variant(family: str) -> Variant:
    """The same i2s export with I2STernaryMatMul's kernel family forced (docs/op.md, "Kernel families"), so
    one run compares the families interleaved (BITNET_ONNX_ISA, inherited, picks the ISA)."""
    return Variant(f"{FAMILY_PREFIX}{family}", partial(_export, weights="i2s"), env=(("BITNET_ONNX_KERNEL", family),),
                   note=f"i2s with BITNET_ONNX_KERNEL={family}")


def family_variants_of(families: Iterable[str]) -> dict[str, Variant]:
    """name -> row of each family's i2s-<family> variant."""
    return {v.name: v for v in map(family_variant, families)}


@cache
def family_variants() -> dict[str, Variant]:
    """One i2s-<family> row per kernel family the op library states (its dispatch description, never a
    copy); none when the library cannot be loaded, since no family could run then."""
    from bitnet_onnx.customops import dispatch

    try:
        return family_variants_of(f.name for f in dispatch().families)
    except (BitnetOnnxError, OSError):
        return {}


def all_variants() -> dict[str, Variant]:
    """Every variant name -> its row, the library's families right after i2s."""
    rows = {}
    for name, row in VARIANTS.items():
        rows[name] = row
        if name == "i2s":
            rows.update(family_variants())
    return rows


def variant(name: str) -> Variant:
    """The row of ``name``; KeyError when there is none."""
    return VARIANTS[name] if name in VARIANTS else family_variants()[name]


def ratio_bases() -> list[str]:
    """Variants the table compares every row against, in column order."""
    return [v.name for v in VARIANTS.values() if v.ratio_base]


def build_variant(model_dir: Path, out_dir: Path, name: str) -> Path:
    """Builds one variant of ``model_dir`` into ``out_dir`` (which must not exist yet)."""
    return variant(name).build(Path(model_dir), Path(out_dir))


def parse_variants(text: str, option: str = "--variants") -> list[str]:
    """Comma-separated variant names -> the list without repeats; unknown names raise naming ``option``."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    known = all_variants()
    if not names or any(v not in known for v in names):
        raise BitnetOnnxError(f"{option} {text!r}: choose from {', '.join(known)}")
    return list(dict.fromkeys(names))


def variants_help() -> str:
    """--variants' help text: the default list, the other names, the notes."""
    known = all_variants()
    others = [v for v in known if v not in DEFAULT_VARIANTS]
    notes = [f"{v.name} = {v.note}" for v in known.values() if v.note]
    return f"weight variants to compare (default {','.join(DEFAULT_VARIANTS)}; also {', '.join(others)}; {'; '.join(notes)})"
