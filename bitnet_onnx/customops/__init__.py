"""The op library from Python: where it is, the ops it has, a ready SessionOptions, ONNX schemas.

    import onnxruntime as ort
    from bitnet_onnx import customops
    sess = ort.InferenceSession("model.onnx", customops.session_options(threads=1))

``register_onnx_schema()`` teaches the ``onnx`` package every op of the domain so
``onnx.checker.check_model(..., full_check=True)`` and ``onnx.shape_inference`` accept graphs
that use them. The ops' contracts are in docs/op.md (I2STernaryMatMul, NormalizeNFC, ByteFallbackBpe) and
docs/attention.md (EncoderAttention); the domain's op table is ``SCHEMAS`` here and
``customops/ort/op_table.h`` in the library (a test checks that they list the same ops).
"""

from __future__ import annotations

from bitnet_onnx.customops import byte_fallback_bpe, encoder_attention, i2s_matmul, normalize_nfc
from bitnet_onnx.customops.library import (
    ATTENTION_PRECISION_ENV,
    DOMAIN,
    DOMAIN_VERSION,
    ISA_ENV,
    KERNEL_ENV,
    LIBRARY_ENV,
    LIBRARY_NAME,
    AttentionPath,
    AttentionTiles,
    Dispatch,
    FamilyRule,
    ForcedChoice,
    IsaDispatch,
    KernelFamily,
    KernelIsa,
    MeasuredShape,
    ShapeChoice,
    attention_auto_precision,
    attention_path,
    dispatch,
    dispatch_from_text,
    extensions_library_path,
    library_kernels,
    library_ops,
    library_path,
    selected_isa,
    selected_kernel_family,
    session_options,
)
from bitnet_onnx.errors import BitnetOnnxError

__all__ = [
    "ATTENTION_PRECISION_ENV", "DOMAIN", "DOMAIN_VERSION", "ISA_ENV", "KERNEL_ENV", "LIBRARY_ENV", "LIBRARY_NAME",
    "SCHEMAS", "AttentionPath", "AttentionTiles", "BitnetOnnxError", "Dispatch", "FamilyRule", "ForcedChoice",
    "IsaDispatch", "KernelFamily", "KernelIsa", "MeasuredShape", "ShapeChoice", "attention_auto_precision",
    "attention_path", "dispatch", "dispatch_from_text", "extensions_library_path", "library_kernels", "library_ops", "library_path",
    "register_onnx_schema", "selected_isa", "selected_kernel_family", "session_options",
]

# op_type -> function building its onnx OpSchema: one row per op of the domain
SCHEMAS = {
    i2s_matmul.NAME: i2s_matmul.schema,
    encoder_attention.NAME: encoder_attention.schema,
    normalize_nfc.NAME: normalize_nfc.schema,
    byte_fallback_bpe.NAME: byte_fallback_bpe.schema,
}


def register_onnx_schema() -> None:
    """Register every op's schema with the ``onnx`` package (idempotent)."""
    from onnx import defs

    for name, build in SCHEMAS.items():
        try:
            defs.get_schema(name, DOMAIN_VERSION, DOMAIN)
        except defs.SchemaError:
            defs.register_schema(build(DOMAIN, DOMAIN_VERSION))
