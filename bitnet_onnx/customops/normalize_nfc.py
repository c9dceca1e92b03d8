"""NormalizeNFC: Unicode NFC of a string tensor in the graph. Its ONNX schema, and its Unicode
tables, taken from this Python's ``unicodedata`` when a graph is exported. Contract: docs/op.md.

The tables are three int-list attributes, flattened entries:

* ``combining_classes``: ``[code point, canonical combining class]`` for every class != 0;
* ``decompositions``: ``[code point, first, second]``, canonical one-step decompositions (the op
  applies them recursively), ``second = -1`` for a singleton; Hangul syllables are left out
  (decomposed algorithmically);
* ``compositions``: ``[first, second, composite]``, the primary composites: every two-code-point
  decomposition except the composition exclusions (those NFC does not recompose).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

from bitnet_onnx.customops.library import DOMAIN
from bitnet_onnx.customops.op_schema import Attr, Param, op_schema

NAME = "NormalizeNFC"
NO_SECOND = -1  # decompositions: a singleton's second code point
TABLE_ATTRIBUTES = ("combining_classes", "decompositions", "compositions")

_DOC = (
    "Unicode NFC (canonical decomposition, canonical ordering, canonical composition; UAX #15) of "
    "each UTF-8 string of `text`, with the Unicode tables given as attributes (from Python's "
    "unicodedata at export: bitnet_onnx.customops.normalize_nfc.nfc_tables). Invalid UTF-8 is an "
    "error. See docs/op.md."
)
_SBASE, _SCOUNT = 0xAC00, 11172  # Hangul syllables


@lru_cache(maxsize=1)
def nfc_tables() -> dict[str, tuple[int, ...]]:
    """The op's table attributes (``TABLE_ATTRIBUTES`` -> flattened ints) for this Python's Unicode
    version (``unicodedata.unidata_version``)."""
    classes: list[int] = []
    decompositions: list[int] = []
    compositions: list[int] = []
    for cp in range(0x110000):
        char = chr(cp)
        ccc = unicodedata.combining(char)
        if ccc:
            classes += (cp, ccc)
        mapping = unicodedata.decomposition(char)
        if not mapping or mapping.startswith("<") or _SBASE <= cp < _SBASE + _SCOUNT:
            continue  # none, or a compatibility mapping (a <tag>), or Hangul
        parts = [int(part, 16) for part in mapping.split()]
        first, second = parts[0], parts[1] if len(parts) == 2 else NO_SECOND
        decompositions += (cp, first, second)
        # A primary composite is one NFC produces from its own pair (exclusions and
        # non-starter decompositions are not).
        if second != NO_SECOND and unicodedata.normalize("NFC", chr(first) + chr(second)) == char:
            compositions += (first, second, cp)
    return {"combining_classes": tuple(classes), "decompositions": tuple(decompositions),
            "compositions": tuple(compositions)}


def nfc_node(input_name: str, output_name: str, name: str | None = None):
    """The one NormalizeNFC node (onnx NodeProto) text -> NFC(text), with this Python's tables.
    The graph must import the ``bitnet_onnx`` domain (version 1)."""
    from onnx import helper

    return helper.make_node(NAME, [input_name], [output_name], name=name, domain=DOMAIN,
                            unicode_version=unicodedata.unidata_version, **nfc_tables())


def _infer(ctx) -> None:
    """output: strings with the shape of text; the table attributes must be there."""
    import onnx

    for attr in TABLE_ATTRIBUTES:
        if ctx.get_attribute(attr) is None:
            raise onnx.shape_inference.InferenceError(f"{NAME}: attribute '{attr}' is required")
    out = onnx.TypeProto()
    out.tensor_type.elem_type = onnx.TensorProto.STRING
    text = ctx.get_input_type(0)
    if text is not None and text.tensor_type.HasField("shape"):
        out.tensor_type.shape.CopyFrom(text.tensor_type.shape)
    ctx.set_output_type(0, out)


def schema(domain: str, version: int):
    return op_schema(
        NAME, domain, version, _DOC,
        inputs=[Param("text", "T", "UTF-8 strings, any shape")],
        outputs=[Param("output", "T", "NFC of each string, text's shape")],
        type_constraints=[("T", ["tensor(string)"], "UTF-8 strings")],
        attributes=[
            Attr("combining_classes", "[code point, canonical combining class]* for classes != 0", kind="INTS",
                 required=True),
            Attr("decompositions", "[code point, first, second or -1]*: canonical one-step decompositions, Hangul "
                 "syllables excluded", kind="INTS", required=True),
            Attr("compositions", "[first, second, composite]*: primary composites", kind="INTS", required=True),
            Attr("unicode_version", "the tables' Unicode version (informational)", kind="STRING"),
        ],
        infer=_infer)
