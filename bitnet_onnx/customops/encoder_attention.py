"""EncoderAttention's ONNX schema (for onnx's checker and shape inference). Contract: docs/attention.md."""

from __future__ import annotations

from bitnet_onnx.customops.op_schema import Attr, Param, op_schema

NAME = "EncoderAttention"

_DOC = (
    "Fused scaled-dot-product attention for encoders: out[b, i, head n] = sum_j softmax_j(scale * "
    "q[b, i, n] . k[b, j, n / (num_heads / kv_num_heads)]) v[b, j, ...] over the keys j with "
    "attention_mask[b, j] != 0 and i - window_left <= j <= i + window_right (j <= i when causal). "
    "Padded queries and queries with no allowed key give zeros. See docs/attention.md."
)

_INPUTS = ("Q", "K", "V", "attention_mask")

# The `precision` attribute's values (docs/attention.md, "Precision"); absent = "f32". "auto": the library
# picks f32 or bf16 for the host it runs on (customops.attention_auto_precision says which).
PRECISIONS = ("f32", "bf16", "auto")
PRECISIONS_BYTES = tuple(p.encode() for p in PRECISIONS)


def _infer(ctx) -> None:
    """out: float32 with Q's shape; checks ranks and, where known, [B, S] and the head widths."""
    import onnx

    fail = onnx.shape_inference.InferenceError
    attrs = {name: ctx.get_attribute(name) for name in ("num_heads", "kv_num_heads")}
    if attrs["num_heads"] is None or attrs["kv_num_heads"] is None:
        raise fail(f"{NAME}: attributes 'num_heads' and 'kv_num_heads' are required")
    num_heads, kv_heads = attrs["num_heads"].i, attrs["kv_num_heads"].i
    if num_heads <= 0 or kv_heads <= 0 or num_heads % kv_heads:
        raise fail(f"{NAME}: num_heads ({num_heads}) must be a positive multiple of kv_num_heads ({kv_heads})")

    precision = ctx.get_attribute("precision")
    if precision is not None and precision.s not in PRECISIONS_BYTES:
        raise fail(f"{NAME}: attribute 'precision' must be one of {', '.join(PRECISIONS)}, got {precision.s!r}")

    out = onnx.TypeProto()
    out.tensor_type.elem_type = onnx.TensorProto.FLOAT
    types = [ctx.get_input_type(i) for i in range(4)]
    shapes = [t.tensor_type.shape.dim if t is not None and t.tensor_type.HasField("shape") else None for t in types]
    for name, dims, rank in zip(_INPUTS, shapes, (3, 3, 3, 2)):
        if dims is not None and len(dims) != rank:
            raise fail(f"{NAME}: input '{name}' must have rank {rank}, got {len(dims)}")
    q = shapes[0]
    if q is not None:
        for name, dims in zip(_INPUTS[1:], shapes[1:]):
            for axis in (0, 1):
                if dims is not None and _known(q[axis]) and _known(dims[axis]) and q[axis].dim_value != dims[axis].dim_value:
                    raise fail(f"{NAME}: input '{name}' axis {axis} is {dims[axis].dim_value}, Q's is {q[axis].dim_value}")
        if _known(q[2]):
            if q[2].dim_value % num_heads:
                raise fail(f"{NAME}: Q's last dimension {q[2].dim_value} is not a multiple of num_heads {num_heads}")
            kv_width = q[2].dim_value // num_heads * kv_heads
            for name, dims in zip(("K", "V"), shapes[1:3]):
                if dims is not None and _known(dims[2]) and dims[2].dim_value != kv_width:
                    raise fail(f"{NAME}: input '{name}' last dimension {dims[2].dim_value} != kv_num_heads x head_dim "
                               f"= {kv_width}")
        for d in q:
            out.tensor_type.shape.dim.add().CopyFrom(d)
    ctx.set_output_type(0, out)


def _known(dim) -> bool:
    return dim.HasField("dim_value")


def schema(domain: str, version: int):
    return op_schema(
        NAME, domain, version, _DOC,
        inputs=[
            Param("Q", "T", "queries [B, S, num_heads * D] (after rotary; not yet scaled)"),
            Param("K", "T", "keys [B, S, kv_num_heads * D] (after rotary)"),
            Param("V", "T", "values [B, S, kv_num_heads * D]"),
            Param("attention_mask", "M", "[B, S], nonzero = a real token"),
        ],
        outputs=[Param("output", "T", "context [B, S, num_heads * D], heads merged as o_proj reads them")],
        type_constraints=[("T", ["tensor(float)"], "float32"), ("M", ["tensor(int64)"], "int64 mask")],
        attributes=[
            Attr("num_heads", "query heads", kind="INT", required=True),
            Attr("kv_num_heads", "key/value heads (divides num_heads)", kind="INT", required=True),
            Attr("scale", "multiplies q before q.k (absent: D^-0.5)", kind="FLOAT"),
            Attr("causal", "1: query i sees keys j <= i", default=0),
            Attr("window_left", "query i sees keys j >= i - window_left (absent: unbounded)", kind="INT"),
            Attr("window_right", "query i sees keys j <= i + window_right (absent: unbounded)", kind="INT"),
            Attr("precision", "what q.k and p.v multiply: f32, bf16 (q, k, p, v rounded to bfloat16, float32 sums), "
                 "or auto (bf16 where the host's bf16 path is faster than f32, else f32)", default="f32"),
        ],
        infer=_infer)
