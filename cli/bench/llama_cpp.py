"""Upstream llama.cpp's bench variants, built through llama-cpp-python (when installed).

``llama.cpp-f16``: the model converted by ``convert-gguf --outtype f16`` without BitNet's
per-projection norms (upstream llama.cpp has no place for them): a standard model of the same
shapes, timed as llama.cpp runs it. ``llama.cpp-tq2_0``: that file quantized by llama.cpp's own
quantizer to TQ2_0, its fastest ternary type (2 bits per weight, 256-value blocks; TQ1_0 packs
tighter and runs slower). The numbers differ from the BitNet model's; the speed is comparable,
the shapes being the same. A bench worker runs the built file with ``runners.RUNNERS["llama.cpp"]``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bitnet_onnx.errors import BitnetOnnxError

GGUF_NAME = "model.gguf"
QUANT_TYPES = {"tq2_0": "LLAMA_FTYPE_MOSTLY_TQ2_0", "tq1_0": "LLAMA_FTYPE_MOSTLY_TQ1_0"}
NOT_INSTALLED = ("the llama.cpp variants need llama-cpp-python (pip install llama-cpp-python; "
                 "it builds llama.cpp from source)")


def missing() -> str | None:
    """Why the llama.cpp variants cannot run here (llama-cpp-python not installed), or None."""
    return None if importlib.util.find_spec("llama_cpp") else NOT_INSTALLED


def import_llama_cpp():
    """The llama_cpp module, or one error saying how to install it."""
    try:
        import llama_cpp
    except ImportError:
        raise BitnetOnnxError(NOT_INSTALLED) from None
    return llama_cpp


def build_f16(model_dir: Path, out_dir: Path) -> Path:
    from bitnet_onnx.convert_gguf.writer import convert
    from bitnet_onnx.testing.archs import TESTING_ARCHS
    from bitnet_onnx.weights import open_model

    import_llama_cpp()  # fail before the conversion when the runner cannot run
    out_dir.mkdir(parents=True)
    # The bench times the model, not the tokenizer: the factory's trained tokenizers have no hash
    # llama.cpp knows, so the architecture's testing record names llama.cpp's pre-tokenizer.
    pre = TESTING_ARCHS[open_model(model_dir).arch.name].llama_cpp_pre_tokenizer
    convert(model_dir, out_dir / GGUF_NAME, "f16", pre_tokenizer=pre, progress=False, bitnet_norms=False)
    return out_dir


def build_quantized(model_dir: Path, out_dir: Path, quant: str) -> Path:
    """The f16 file, quantized by llama.cpp's llama_model_quantize to ``quant``."""
    llama_cpp = import_llama_cpp()
    staging = out_dir.with_name(out_dir.name + ".f16")
    build_f16(model_dir, staging)
    out_dir.mkdir(parents=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANT_TYPES[quant])
    source, target = staging / GGUF_NAME, out_dir / GGUF_NAME
    try:
        if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params) != 0:
            raise BitnetOnnxError(f"{source}: llama.cpp could not quantize it to {quant.upper()}")
    finally:
        source.unlink()
        staging.rmdir()
    return out_dir
