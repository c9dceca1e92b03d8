"""The I2STernaryMatMul op library from Python: where it is, a ready SessionOptions, the ONNX schema.

    import onnxruntime as ort
    from bitnet_onnx import customops
    sess = ort.InferenceSession("model.onnx", customops.session_options(threads=1))

``register_onnx_schema()`` teaches the ``onnx`` package the op (domain ``bitnet_onnx``, version 1)
so ``onnx.checker.check_model(..., full_check=True)`` and ``onnx.shape_inference`` accept graphs
that use it. The op's contract is docs/op.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import OP_DOMAIN, OP_DOMAIN_VERSION, OP_NAME
from .errors import BitnetOnnxError

LIBRARY_NAME = "libbitnet_onnx_ops.so"
LIBRARY_ENV = "BITNET_ONNX_LIBRARY"  # path of the library to use instead of the installed one
ISA_ENV = "BITNET_ONNX_ISA"  # read by the library: scalar|avx2|avxvnni|avx512vnni|amx|neon


def library_path() -> str:
    """Absolute path of the op library.

    ``$BITNET_ONNX_LIBRARY`` if set; otherwise the library CMake installed into the ``bitnet_onnx``
    package. The package's search path covers both installs: a wheel puts it next to this file,
    an editable scikit-build-core install in ``site-packages/bitnet_onnx/`` (listed in
    ``bitnet_onnx.__path__`` next to the source folder).
    """
    override = os.environ.get(LIBRARY_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise BitnetOnnxError(f"{LIBRARY_ENV}={override}: no such file")
        return str(path.resolve())
    import bitnet_onnx

    searched = [Path(p) for p in bitnet_onnx.__path__]
    for folder in searched:
        candidate = folder / LIBRARY_NAME
        if candidate.is_file():
            return str(candidate.resolve())
    raise BitnetOnnxError(
        f"op library {LIBRARY_NAME} not found in {', '.join(map(str, searched))}; build and install it with "
        f"`pip install .` (or `pip install --no-build-isolation -e .`) in the bitnet-onnx checkout, "
        f"or set {LIBRARY_ENV}"
    )


def session_options(threads: int | None = None):
    """A new ``onnxruntime.SessionOptions`` with the op library registered.

    ``threads`` sets ``intra_op_num_threads`` (the op splits its work on ORT's intra-op pool).
    """
    import onnxruntime as ort

    if threads is not None and (not isinstance(threads, int) or threads < 0):
        raise BitnetOnnxError(f"threads must be an integer >= 0 (0 = ORT default), got {threads!r}")
    so = ort.SessionOptions()
    so.register_custom_ops_library(library_path())
    if threads is not None:
        so.intra_op_num_threads = threads
    return so


_DOC = (
    "BitNet linear layer: optional fused RMSNorm of X, per-token absmax int8 quantization, "
    "exact integer products with I2_S-packed ternary weights W [N, K/4], times scale. "
    "Y[..., N] = (sum_k q[..., k] * T[n, k]) / a[...] * scale. See docs/op.md."
)


def _infer(ctx) -> None:
    """Y: float32 [X dims but the last..., N] with N = W's first dimension (symbolic when unknown)."""
    import onnx

    out = onnx.TypeProto()
    out.tensor_type.elem_type = onnx.TensorProto.FLOAT
    x_type = ctx.get_input_type(0)
    w_type = ctx.get_input_type(1)
    known = x_type is not None and w_type is not None  # None: X comes from an op onnx has no schema for
    if known and x_type.tensor_type.HasField("shape") and w_type.tensor_type.HasField("shape"):
        x_dims = list(x_type.tensor_type.shape.dim)
        w_dims = list(w_type.tensor_type.shape.dim)
        if not x_dims:
            raise onnx.shape_inference.InferenceError(f"{OP_NAME}: input 'X' must have rank >= 1 ([..., K])")
        if len(w_dims) != 2:
            raise onnx.shape_inference.InferenceError(f"{OP_NAME}: input 'W' must be 2-D [N, K/4], got rank {len(w_dims)}")
        k_dim, kb_dim = x_dims[-1], w_dims[1]
        if k_dim.HasField("dim_value") and kb_dim.HasField("dim_value") and k_dim.dim_value != 4 * kb_dim.dim_value:
            raise onnx.shape_inference.InferenceError(
                f"{OP_NAME}: input 'W' has {kb_dim.dim_value} bytes per row, X has K = {k_dim.dim_value} "
                f"(needs K/4 = {k_dim.dim_value // 4})"
            )
        shape = out.tensor_type.shape
        for d in x_dims[:-1] + [w_dims[0]]:
            shape.dim.add().CopyFrom(d)
    ctx.set_output_type(0, out)


def _schema():
    from onnx.defs import OpSchema

    param = OpSchema.FormalParameter
    optional = OpSchema.FormalParameterOption.Optional
    schema = OpSchema(
        OP_NAME,
        OP_DOMAIN,
        OP_DOMAIN_VERSION,
        _DOC,
        inputs=[
            param("X", "T", "activations [..., K], K % 128 == 0"),
            param("W", "T1", "I2_S ternary weight bytes [N, K/4]"),
            param("scale", "T", "weight scale s_w, shape [1]"),
            param("norm_weight", "T2", "optional fused RMSNorm weight [K]", param_option=optional),
        ],
        outputs=[param("Y", "T", "output [..., N]")],
        type_constraints=[
            ("T", ["tensor(float)"], "float32 activations, scale and output"),
            ("T1", ["tensor(uint8)"], "packed I2_S bytes"),
            ("T2", ["tensor(float)", "tensor(float16)"], "norm weight"),
        ],
        attributes=[
            OpSchema.Attribute(
                "epsilon", _float_attr(1e-6), "RMSNorm epsilon (used with norm_weight)"
            ),
        ],
    )
    if hasattr(schema, "set_type_and_shape_inference_function"):  # onnx >= 1.16
        schema.set_type_and_shape_inference_function(_infer)
    return schema


def _float_attr(value: float):
    import onnx

    return onnx.helper.make_attribute("epsilon", value)


def register_onnx_schema() -> None:
    """Register the op's schema with the ``onnx`` package (idempotent)."""
    from onnx import defs

    try:
        defs.get_schema(OP_NAME, OP_DOMAIN_VERSION, OP_DOMAIN)
        return
    except defs.SchemaError:
        pass
    defs.register_schema(_schema())
