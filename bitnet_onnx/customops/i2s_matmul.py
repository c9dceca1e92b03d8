"""I2STernaryMatMul's ONNX schema (for onnx's checker and shape inference). Contract: docs/op.md."""

from __future__ import annotations

from bitnet_onnx.customops.op_schema import Attr, Param, op_schema

NAME = "I2STernaryMatMul"

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
            raise onnx.shape_inference.InferenceError(f"{NAME}: input 'X' must have rank >= 1 ([..., K])")
        if len(w_dims) != 2:
            raise onnx.shape_inference.InferenceError(f"{NAME}: input 'W' must be 2-D [N, K/4], got rank {len(w_dims)}")
        k_dim, kb_dim = x_dims[-1], w_dims[1]
        if k_dim.HasField("dim_value") and kb_dim.HasField("dim_value") and k_dim.dim_value != 4 * kb_dim.dim_value:
            raise onnx.shape_inference.InferenceError(
                f"{NAME}: input 'W' has {kb_dim.dim_value} bytes per row, X has K = {k_dim.dim_value} "
                f"(needs K/4 = {k_dim.dim_value // 4})"
            )
        shape = out.tensor_type.shape
        for d in x_dims[:-1] + [w_dims[0]]:
            shape.dim.add().CopyFrom(d)
    ctx.set_output_type(0, out)


def schema(domain: str, version: int):
    return op_schema(
        NAME, domain, version, _DOC,
        inputs=[
            Param("X", "T", "activations [..., K], K % 128 == 0"),
            Param("W", "T1", "I2_S ternary weight bytes [N, K/4]"),
            Param("scale", "T", "weight scale s_w, shape [1]"),
            Param("norm_weight", "T2", "optional fused RMSNorm weight [K]", optional=True),
        ],
        outputs=[Param("Y", "T", "output [..., N]")],
        type_constraints=[
            ("T", ["tensor(float)"], "float32 activations, scale and output"),
            ("T1", ["tensor(uint8)"], "packed I2_S bytes"),
            ("T2", ["tensor(float)", "tensor(float16)"], "norm weight"),
        ],
        attributes=[Attr("epsilon", "RMSNorm epsilon (used with norm_weight)", default=1e-6)],
        infer=_infer)

