"""The tokenizer front of the strings-in graph: texts -> the tokenizer op's right-padded (ids, mask).

The tokenizer node per family (our ByteFallbackBpe for SentencePiece-style BPE with byte fallback,
else onnxruntime-extensions' HfJsonTokenizer built by the extensions' own ``gen_processing_models``),
the UTF-8 guard and NFC in front of it, and an ORT session of the front alone for the probe check.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from onnx import TensorProto

from bitnet_onnx import customops
from bitnet_onnx.customops import byte_fallback_bpe, normalize_nfc
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.export.builder import EXTENSIONS_DOMAIN, GraphBuilder
from bitnet_onnx.io import MAX_JSON_BYTES, read_input_file
from bitnet_onnx.tokenizer_json import TokenizerJson

EXTENSIONS_TOKENIZER = "HfJsonTokenizer"
# tokenizer.json normalizers the graph applies: NFC by our op, Replace inside the extensions' tokenizer
# (both checked by the probe corpus)
EXTENSIONS_NORMALIZERS = {"NFC", "Replace"}
SCOPE = "text_input"  # of every node of the pre-processing graph (and of the probe's front)
UTF8_GUARD = "utf8_guard: a text is not valid UTF-8 or holds U+0000"  # the node ORT's error names
UTF8_GUARD_NAME = f"/{SCOPE}/{UTF8_GUARD}"
# Unicode scalar values but U+0000, which the extensions' tokenizer takes for the end of the text
UTF8_PATTERN = r"(?s)[\x{1}-\x{D7FF}\x{E000}-\x{10FFFF}]*"
PROTOBUF_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
FRONT_INPUT, FRONT_OUTPUTS = "text", ("ids", "mask")  # of the probe's front model


def tokenizer_node(tokenizer: TokenizerJson, max_length: int) -> onnx.NodeProto:
    """The node that turns texts into (ids, mask), right-padded: our ByteFallbackBpe when ``tokenizer``
    (tokenizer.json, parsed once) is of its family (its ids capped at ``max_length``: later ones are cut
    anyway), else onnxruntime-extensions' HfJsonTokenizer built by the extensions' own API from the
    file's text and the tokenizer_config.json next to it."""
    tok_json, tok_file = tokenizer.data, tokenizer.path
    if byte_fallback_bpe.supports(tok_json):
        return byte_fallback_bpe.bpe_node(tok_json, tok_file, "text", ["ids", "mask"], max_length=max_length)
    check_extensions_normalizer(tok_json, tok_file)
    gen_processing_models = _extensions_api()
    cfg_file = tok_file.with_name("tokenizer_config.json")
    config = read_input_file(cfg_file, limit=MAX_JSON_BYTES).decode("utf-8") if os.path.lexists(cfg_file) else "{}"
    pre, _ = gen_processing_models(EXTENSIONS_TOKENIZER,
                                   pre_kwargs={"tokenizer_vocab": tokenizer.text, "tokenizer_config": config})
    (node,) = [n for n in pre.graph.node if n.op_type == EXTENSIONS_TOKENIZER]
    return node


def row_cap(tokenizer: onnx.NodeProto) -> int:
    """The ids the tokenizer node keeps per row at most (0: no cap)."""
    return next((a.i for a in tokenizer.attribute if a.name == "max_length"), 0)


def normalizer_steps(tokenizer_json: dict) -> list[dict]:
    norm = tokenizer_json.get("normalizer")
    return [] if norm is None else norm.get("normalizers", []) if norm.get("type") == "Sequence" else [norm]


def needs_nfc(tokenizer_json: dict) -> bool:
    """tokenizer.json normalizes to NFC (the extensions' tokenizer skips it: our NormalizeNFC runs first)."""
    return any(step.get("type") == "NFC" for step in normalizer_steps(tokenizer_json))


def check_extensions_normalizer(tokenizer_json: dict, source: Path) -> None:
    for step in normalizer_steps(tokenizer_json):
        if step.get("type") not in EXTENSIONS_NORMALIZERS:
            raise BitnetOnnxError(f"{source}: --text-input: normalizer {step.get('type')!r} is not applied by "
                                  "the in-graph tokenizer; export without --text-input")


def _extensions_api():
    """``gen_processing_models``; the import sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python for the
    process (and its children), which would make every later onnx load in a subprocess slow: undone."""
    saved = os.environ.get(PROTOBUF_ENV)
    try:
        from onnxruntime_extensions import gen_processing_models
    except ImportError:
        raise BitnetOnnxError("--text-input needs onnxruntime-extensions (pip install 'bitnet-onnx[text]')") from None
    finally:
        if saved is None:
            os.environ.pop(PROTOBUF_ENV, None)
        else:
            os.environ[PROTOBUF_ENV] = saved
    return gen_processing_models


def add_front(b: GraphBuilder, texts: str, tokenizer: onnx.NodeProto, nfc: bool) -> list[str]:
    """Texts -> the tokenizer op's right-padded (ids, mask): the UTF-8 guard, NFC when tokenizer.json
    normalizes to it, the tokenizer node. Call inside ``b.scope(SCOPE)`` (the guard's name)."""
    # RE2 decodes UTF-8; bytes that are not UTF-8 (truncated, overlong, surrogates, > U+10FFFF)
    # match no class of code points.
    valid = b.op("RegexFullMatch", [texts], pattern=UTF8_PATTERN, name="utf8_valid")
    texts = _guard(b, texts, b.op("Not", [valid]), UTF8_GUARD)
    if nfc:
        texts = b.copy_node(normalize_nfc.nfc_node("in", "out"), [texts], name="nfc")
    return b.copy_node(tokenizer, [texts], name="tokenizer", outputs=2)


def _guard(b: GraphBuilder, texts: str, bad: str, name: str) -> str:
    """``texts`` unchanged, or an ORT error naming ``name`` when any ``bad`` [N] is true: a Reshape to
    N + (number of bad texts) elements, the only way to fail a run with a message in plain ONNX."""
    count = b.op("ReduceSum", [b.op("Cast", [bad], to=TensorProto.INT64), b.i64([0])], keepdims=1)
    return b.op("Reshape", [texts, b.op("Add", [b.op("Shape", [texts]), count])], name=name)


def needs_extensions(tokenizer: onnx.NodeProto) -> bool:
    return tokenizer.domain == EXTENSIONS_DOMAIN


def front_session(tokenizer: onnx.NodeProto, nfc: bool, opset: int, ir_version: int):
    """An ORT session of ``add_front`` alone (FRONT_INPUT -> FRONT_OUTPUTS), for the probe check."""
    import onnxruntime as ort

    b = GraphBuilder(opset=opset)
    text = b.add_input(FRONT_INPUT, TensorProto.STRING, ["N"])
    with b.scope(SCOPE):
        outs = add_front(b, text, tokenizer, nfc)
    for out, name in zip(outs, FRONT_OUTPUTS):
        b.add_output(out, name, TensorProto.INT64, ["N", "S"])
    model = b.model("text_front")
    model.ir_version = ir_version
    so = customops.session_options(extensions=needs_extensions(tokenizer),
                                   op_library=nfc or tokenizer.domain == customops.DOMAIN)
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
