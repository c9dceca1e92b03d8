"""An op's ONNX schema as data: each op module lists its inputs, outputs, type constraints and attributes
as records, and ``op_schema`` turns them into the ``onnx.defs.OpSchema`` the ``onnx`` package checks
graphs against (so adding an op writes its records, not the OpSchema calls again)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """One input or output."""

    name: str
    type_str: str  # a type-constraint name ("T") or a tensor type
    doc: str
    optional: bool = False


@dataclass(frozen=True)
class Attr:
    """One attribute: either ``default`` (its value when absent) or ``kind`` (an OpSchema.AttrType name such
    as "INT", "INTS", "FLOAT", "STRING", "TENSOR") with ``required``."""

    name: str
    doc: str
    default: object = None
    kind: str | None = None
    required: bool = False


def op_schema(name: str, domain: str, version: int, doc: str, *, inputs: Sequence[Param], outputs: Sequence[Param],
              type_constraints: Sequence[tuple[str, list[str], str]], attributes: Sequence[Attr],
              infer: Callable) -> object:
    """The ``OpSchema`` of op ``name`` in ``domain`` at ``version``, with ``infer`` as its type and shape
    inference function."""
    from onnx import helper
    from onnx.defs import OpSchema

    def param(p: Param):
        option = OpSchema.FormalParameterOption.Optional if p.optional else OpSchema.FormalParameterOption.Single
        return OpSchema.FormalParameter(p.name, p.type_str, p.doc, param_option=option)

    def attribute(a: Attr):
        if a.default is not None:
            return OpSchema.Attribute(a.name, helper.make_attribute(a.name, a.default), a.doc)
        return OpSchema.Attribute(a.name, getattr(OpSchema.AttrType, a.kind), a.doc, required=a.required)

    schema = OpSchema(name, domain, version, doc, inputs=[param(p) for p in inputs],
                      outputs=[param(p) for p in outputs], type_constraints=list(type_constraints),
                      attributes=[attribute(a) for a in attributes])
    schema.set_type_and_shape_inference_function(infer)
    return schema
