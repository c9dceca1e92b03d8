"""Strings in, embeddings out: the tokenizer and the manifest's rules as ONNX in front of the model.

``bitnet-onnx export --text-input`` writes, next to ``model.onnx`` (ids in), ``model_text.onnx``: the
same model (same weights, same external data file) behind a pre-processing graph

    text: string [N], prompt: string [1] (optional, default: the manifest's default prompt or "")
      -> StringConcat(prompt, text)  (and the prompt alone in row 0 when the pooling leaves it out)
      -> UTF-8 guard: bytes that are not UTF-8 (or U+0000) are an ORT error naming the reason
      -> NormalizeNFC (our op) when tokenizer.json's normalizer is NFC
      -> the tokenizer: our ByteFallbackBpe for SentencePiece-style BPE with byte fallback (Gemma3),
         else onnxruntime-extensions' HfJsonTokenizer built by the extensions' own
         ``gen_processing_models`` (byte-level BPE: Qwen3)
      -> the special tokens of tokenizer.json's post-processor, the EOS rule, truncation to
         max_length, the mask from the true lengths, padding on the manifest's side
      -> the model: sentence_embedding, token_embeddings, plus input_ids and attention_mask
         (and prompt_length, the prompt's tokens less one, for include_prompt: false poolings).

The two graphs are joined by ``onnx.compose.merge_graphs``. The export runs the chosen tokenizer on
a probe corpus against the ``tokenizers`` library and refuses when they differ.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bitnet_onnx import customops
from bitnet_onnx.customops import byte_fallback_bpe, normalize_nfc
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import PROMPT_INPUT, PROMPT_LENGTH_INPUT, TEXT_INPUT, TEXT_MODEL_NAME, Manifest
from bitnet_onnx.export.builder import GraphBuilder

INT64 = TensorProto.INT64
IDS, MASK = "input_ids", "attention_mask"
MODEL_OUTPUTS = ("sentence_embedding", "token_embeddings")
EXTENSIONS_DOMAIN = "ai.onnx.contrib"
EXTENSIONS_TOKENIZER = "HfJsonTokenizer"
# tokenizer.json normalizers the graph applies: NFC by our op, Replace inside the extensions' tokenizer
# (both checked by the probe corpus)
EXTENSIONS_NORMALIZERS = {"NFC", "Replace"}
UTF8_GUARD_NAME = "/text_input/utf8_guard: a text is not valid UTF-8 or holds U+0000"
# Unicode scalar values but U+0000, which the extensions' tokenizer takes for the end of the text
UTF8_PATTERN = r"(?s)[\x{1}-\x{D7FF}\x{E000}-\x{10FFFF}]*"
PROTOBUF_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"

# Probe texts the export checks the in-graph ids on (the tests use a far larger corpus).
PROBE_TEXTS = [
    "", " ", "a", "Hello, world!", "  two  spaces\tand\ttabs\r\nCRLF\n\nlines  ", "x" * 40,
    "def f(x):\n    return x ** 2  # square", "https://example.com/a?b=1&c=%20", "3.14159 1,000,000 2025-06-01",
    "café naïve Ærø façade", "日本語のテキスト", "中文文本，标点。", "한국어 텍스트", "مرحبا بالعالم", "שלום עולם",
    "Привет, мир", "👩\u200d💻 🇫🇷 🏳️\u200d🌈", "zero\u200bwidth\u200cjoin\u200d", "<|endoftext|> <bos> <eos> <pad>",
    "\u00a0nbsp\u2003em\u3000ideographic", "ǅ ﬁ ① ²", "tab\tend\t", "} else { return -1; }",
    "y" * 150 + " long words",
]


# -- the tokenizer node ------------------------------------------------------------------------
def tokenizer_node(folder: Path, tok_json: dict, max_length: int) -> onnx.NodeProto:
    """The node that turns texts into (ids, mask), right-padded: our ByteFallbackBpe when the folder's
    tokenizer.json (parsed: ``tok_json``) is of its family (its ids capped at ``max_length``: later
    ones are cut anyway), else onnxruntime-extensions' HfJsonTokenizer built by the extensions' own API."""
    tok_file = folder / "tokenizer.json"
    if byte_fallback_bpe.supports(tok_json):
        return byte_fallback_bpe.bpe_node(tok_json, tok_file, "text", ["ids", "mask"], max_length=max_length)
    check_extensions_normalizer(tok_json, tok_file)
    gen_processing_models = _extensions_api()
    cfg_file = folder / "tokenizer_config.json"
    config = cfg_file.read_text(encoding="utf-8") if cfg_file.is_file() else "{}"
    pre, _ = gen_processing_models(EXTENSIONS_TOKENIZER, pre_kwargs={"tokenizer_vocab": tok_file.read_text(
        encoding="utf-8"), "tokenizer_config": config})
    (node,) = [n for n in pre.graph.node if n.op_type == EXTENSIONS_TOKENIZER]
    return node


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


def _frame(with_specials: list[int], plain: list[int]) -> tuple[list[int], list[int]] | None:
    """(prefix, suffix) such that with_specials == prefix + plain + suffix, or None."""
    for start in range(len(with_specials) - len(plain) + 1):
        if with_specials[start:start + len(plain)] == plain:
            return with_specials[:start], with_specials[start + len(plain):]
    return None


class _Rules:
    """The manifest's rules on the tokenizer op's right-padded output, as ONNX ops.

    The op's row (its own special tokens ``op_prefix``/``op_suffix`` around the text's ids) becomes
    tokenizer.json's row (``prefix`` + ids + ``suffix``), then: a trailing EOS is dropped and
    re-appended after truncation to max_length (EOS rule), an empty row gets one pad token
    (no EOS rule), rows are padded on the manifest's side. Every row is read through one index
    function, ``full_at``, so no row is ever copied or shifted.
    """

    def __init__(self, b: GraphBuilder, raw: str, raw_mask: str, manifest: Manifest,
                 op_frame: tuple[list[int], list[int]], frame: tuple[list[int], list[int]]):
        self.b, self.m = b, manifest
        self.prefix, self.suffix = frame
        self.pad = int(manifest.pad_token_id)
        op_len = b.op("ReduceSum", [raw_mask, b.i64([1])], keepdims=0, name="op_lengths")
        n_op = len(op_frame[0]) + len(op_frame[1])
        self.body_len = b.op("Max", [b.op("Sub", [op_len, b.i64(n_op)]), b.i64(0)], name="body_lengths")
        self.skip = len(op_frame[0])  # op's prefix tokens before the body
        # One pad column so that gathers have a column even when every row is empty.
        self.raw = b.op("Pad", [raw, b.i64([0, 0, 0, 1]), b.i64(self.pad)], name="raw_padded")
        self.raw_last = b.op("Squeeze", [b.op("Sub", [b.op("Shape", [self.raw], start=1, end=2), b.i64([1])]),
                                         b.i64([0])], name="raw_last_column")

    def full_length(self) -> str:
        n = len(self.prefix) + len(self.suffix)
        return self.b.op("Add", [self.body_len, self.b.i64(n)], name="full_lengths") if n else self.body_len

    def full_at(self, idx: str, body_len: str) -> str:
        """Token of tokenizer.json's row at column ``idx`` ([N, K], in range or clamped)."""
        b, p = self.b, len(self.prefix)
        src = b.op("Add", [idx, b.i64(self.skip - p)]) if self.skip != p else idx
        src = b.op("Min", [b.op("Max", [src, b.i64(0)]), self.raw_last])
        tok = b.op("GatherElements", [self.raw, src], axis=1, name="body_tokens")
        if self.suffix:
            s_idx = b.op("Sub", [idx, b.op("Add", [body_len, b.i64(p)])])
            s_idx = b.op("Min", [b.op("Max", [s_idx, b.i64(0)]), b.i64(len(self.suffix) - 1)])
            s_tok = b.op("Gather", [b.i64(self.suffix), s_idx], axis=0, name="suffix_tokens")
            after = b.op("GreaterOrEqual", [idx, b.op("Add", [body_len, b.i64(p)])])
            tok = b.op("Where", [after, s_tok, tok])
        if self.prefix:
            p_tok = b.op("Gather", [b.i64(self.prefix), b.op("Min", [b.op("Max", [idx, b.i64(0)]), b.i64(p - 1)])],
                         axis=0, name="prefix_tokens")
            tok = b.op("Where", [b.op("Less", [idx, b.i64(p)]), p_tok, tok])
        return tok

    def build(self) -> tuple[str, str]:
        b, m = self.b, self.m
        body_col = b.op("Unsqueeze", [self.body_len, b.i64([1])], name="body_lengths_col")
        full_len = self.full_length()
        eos = m.append_eos_token_id
        if eos is not None:
            last_idx = b.op("Unsqueeze", [b.op("Sub", [full_len, b.i64(1)]), b.i64([1])])
            last = b.op("Squeeze", [self.full_at(last_idx, body_col), b.i64([1])], name="last_token")
            ends_eos = b.op("And", [b.op("Greater", [full_len, b.i64(0)]), b.op("Equal", [last, b.i64(int(eos))])])
            kept = b.op("Sub", [full_len, b.op("Cast", [ends_eos], to=INT64)])
            kept = b.op("Min", [kept, b.i64(int(m.max_length) - 1)], name="kept")
            final = b.op("Add", [kept, b.i64(1)], name="lengths")
        else:
            kept = b.op("Min", [full_len, b.i64(int(m.max_length))], name="kept")
            final = b.op("Max", [kept, b.i64(1)], name="lengths")
        width = b.op("ReduceMax", [b.op("Concat", [final, b.i64([0])], axis=0)], keepdims=0, name="width")
        pos = b.op("Unsqueeze", [b.op("Range", [b.i64(0), width, b.i64(1)]), b.i64([0])], name="positions")
        final_col = b.op("Unsqueeze", [final, b.i64([1])])
        kept_col = b.op("Unsqueeze", [kept, b.i64([1])])
        if m.padding_side == "left":
            rel = b.op("Sub", [pos, b.op("Sub", [width, final_col])], name="row_positions")
        else:
            rel = b.op("Add", [pos, b.op("Mul", [final_col, b.i64(0)])], name="row_positions")  # [N, W]
        real = b.op("And", [b.op("GreaterOrEqual", [rel, b.i64(0)]), b.op("Less", [rel, final_col])], name="real")
        tok = self.full_at(b.op("Max", [rel, b.i64(0)]), body_col)
        if eos is not None:
            tok = b.op("Where", [b.op("Equal", [rel, kept_col]), b.i64(int(eos)), tok], name="append_eos")
        else:
            tok = b.op("Where", [b.op("Less", [rel, kept_col]), tok, b.i64(self.pad)], name="empty_rows")
        ids = b.op("Where", [real, tok, b.i64(self.pad)], name="pad")
        return ids, b.op("Cast", [real], to=INT64, name="mask")


def _default_prompt(manifest: Manifest) -> str:
    name = manifest.default_prompt_name
    return manifest.prompts.get(name, "") if name else ""


def preprocess_model(folder: Path, manifest: Manifest, opset: int, ir_version: int,
                     prompt_length: bool = False) -> onnx.ModelProto:
    """The strings -> (input_ids, attention_mask[, prompt_length]) model; ``prompt_length``: also the
    prompt's own token count less one, per text (pooling that leaves the prompt out)."""
    from tokenizers import Tokenizer

    tok_file = folder / "tokenizer.json"
    tok_json = json.loads(tok_file.read_text(encoding="utf-8"))
    nfc = needs_nfc(tok_json)
    node = tokenizer_node(folder, tok_json, int(manifest.max_length) + 2)  # + the specials a row may lose

    # The special tokens around a text: tokenizer.json's post-processor and the tokenizer op's.
    tok = Tokenizer.from_file(str(tok_file))
    tok.no_truncation()
    tok.no_padding()
    probe = "a"
    plain = tok.encode(probe, add_special_tokens=False).ids
    frame = _frame(tok.encode(probe, add_special_tokens=True).ids, plain)
    front = _front_session(node, nfc, opset, ir_version)
    op_ids = front.run(None, {"text": np.array([probe], dtype=object)})[0][0].tolist()
    op_frame = _frame(op_ids, plain)
    if frame is None or op_frame is None:
        raise BitnetOnnxError(f"{tok_file}: --text-input: the in-graph tokenizer gives {op_ids} for {probe!r}, "
                              f"tokenizer.json {tok.encode(probe).ids}; it cannot run in the graph")
    cap = next((a.i for a in node.attribute if a.name == "max_length"), 0)
    check_tokenizer(folder, front, (op_frame, frame), cap)

    b = GraphBuilder(opset=opset)
    text = b.add_input(TEXT_INPUT, TensorProto.STRING, ["batch"])
    prompt = b.add_input(PROMPT_INPUT, TensorProto.STRING, [1])
    b.initializers.append(numpy_helper.from_array(np.array([_default_prompt(manifest)], dtype=object), PROMPT_INPUT))
    with b.scope("text_input"):
        full = b.op("StringConcat", [prompt, text], name="prompt_and_text")
        if prompt_length:  # the prompt alone is row 0: one tokenizer run for both
            full = b.op("Concat", [prompt, full], axis=0, name="prompt_row_and_texts")
        raw, raw_mask = _front(b, full, node, nfc)
        rows = {}
        if prompt_length:
            for key, start, end in (("prompt", 0, 1), ("texts", 1, np.iinfo(np.int64).max)):
                rows[key] = [b.op("Slice", [x, b.i64([start]), b.i64([end]), b.i64([0])], name=f"{key}_rows")
                             for x in (raw, raw_mask)]
            raw, raw_mask = rows["texts"]
        rules = _Rules(b, raw, raw_mask, manifest, op_frame, frame)
        ids, mask = rules.build()
        if prompt_length:
            count = _prompt_length(b, _Rules(b, *rows["prompt"], manifest, op_frame, frame), prompt, text)
    b.add_output(ids, IDS, INT64, ["batch", "sequence"])
    b.add_output(mask, MASK, INT64, ["batch", "sequence"])
    if prompt_length:
        b.add_output(count, PROMPT_LENGTH_INPUT, INT64, ["batch"])
    model = b.model("bitnet_onnx_text_input", doc="texts -> input_ids, attention_mask")
    model.ir_version = ir_version
    _prefix_constants(model, "/text_input")
    return model


def _front(b: GraphBuilder, texts: str, tokenizer: onnx.NodeProto, nfc: bool) -> list[str]:
    """Texts -> the tokenizer op's right-padded (ids, mask): the UTF-8 guard, NFC when tokenizer.json
    normalizes to it, the tokenizer node."""
    # RE2 decodes UTF-8; bytes that are not UTF-8 (truncated, overlong, surrogates, > U+10FFFF)
    # match no class of code points.
    valid = b.op("RegexFullMatch", [texts], pattern=UTF8_PATTERN, name="utf8_valid")
    texts = _guard(b, texts, b.op("Not", [valid]), UTF8_GUARD_NAME)
    if nfc:
        texts = _copy_node(b, normalize_nfc.nfc_node("in", "out"), [texts], 1, "nfc")
    return _copy_node(b, tokenizer, [texts], 2, "tokenizer")


def _copy_node(b: GraphBuilder, proto: onnx.NodeProto, inputs: list[str], outputs: int, name: str):
    """``proto``'s op and attributes on the builder's own names."""
    if proto.domain == EXTENSIONS_DOMAIN:
        b.opsets[EXTENSIONS_DOMAIN] = 1  # the extensions register their ops at version 1
    out = b.op(proto.op_type, inputs, outputs=outputs, domain=proto.domain, name=name)
    b.nodes[-1].attribute.extend(proto.attribute)
    return out


def _prompt_length(b: GraphBuilder, prompt_rules: "_Rules", prompt: str, text: str) -> str:
    """Per text, the prompt's tokens with tokenizer.json's specials less one (sentence-transformers'
    count; Embedder.prompt_length); 0 for an empty prompt."""
    count = b.op("Max", [b.op("Sub", [prompt_rules.full_length(), b.i64(1)]), b.i64(0)])
    empty = b.op("Equal", [prompt, b.const([""], dtype=object)], name="prompt_is_empty")
    count = b.op("Where", [empty, b.i64([0]), count], name="prompt_tokens")
    return b.op("Expand", [count, b.op("Shape", [text])], name="prompt_length")


def _front_session(tokenizer: onnx.NodeProto, nfc: bool, opset: int, ir_version: int):
    """An ORT session of ``_front`` alone (texts -> the op's ids, mask), for the probe check."""
    import onnxruntime as ort

    b = GraphBuilder(opset=opset)
    text = b.add_input("text", TensorProto.STRING, ["N"])
    for out, name in zip(_front(b, text, tokenizer, nfc), ("ids", "mask")):
        b.add_output(out, name, INT64, ["N", "S"])
    model = b.model("text_front")
    model.ir_version = ir_version
    so = customops.session_options(extensions=tokenizer.domain == EXTENSIONS_DOMAIN,
                                   op_library=nfc or tokenizer.domain == customops.DOMAIN)
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _guard(b: GraphBuilder, texts: str, bad: str, name: str) -> str:
    """``texts`` unchanged, or an ORT error naming ``name`` when any ``bad`` [N] is true: a Reshape to
    N + (number of bad texts) elements, the only way to fail a run with a message in plain ONNX."""
    count = b.op("ReduceSum", [b.op("Cast", [bad], to=INT64), b.i64([0])], keepdims=1)
    out = b.op("Reshape", [texts, b.op("Add", [b.op("Shape", [texts]), count])])
    b.nodes[-1].name = name
    return out


def _prefix_constants(model: onnx.ModelProto, prefix: str) -> None:
    """Renames the builder's shared constants (/const/...) so they cannot clash with the model's."""
    names = {t.name: prefix + t.name for t in model.graph.initializer if t.name != PROMPT_INPUT}
    for t in model.graph.initializer:
        t.name = names.get(t.name, t.name)
    for node in model.graph.node:
        node.input[:] = [names.get(x, x) for x in node.input]


def compose(pre: onnx.ModelProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """``pre`` feeding ``model`` (one graph, by onnx.compose); the model's initializers are shared, not
    copied, when ``model`` already points at external data."""
    outputs = [o.name for o in model.graph.output if o.name in MODEL_OUTPUTS] + [IDS, MASK]
    fed = {i.name for i in model.graph.input}
    io_map = [(name, name) for name in (IDS, MASK, PROMPT_LENGTH_INPUT) if name in fed]
    graph = onnx.compose.merge_graphs(pre.graph, model.graph, io_map=io_map,
                                      outputs=outputs, name=model.graph.name + "_text", doc_string=model.doc_string)
    order = {name: i for i, name in enumerate(outputs)}
    ordered = sorted(graph.output, key=lambda o: order[o.name])
    del graph.output[:]
    graph.output.extend(ordered)
    opsets = {o.domain: o.version for o in model.opset_import}
    for o in pre.opset_import:
        if opsets.setdefault(o.domain, o.version) != o.version:
            raise BitnetOnnxError(f"--text-input: opset {o.domain or 'ai.onnx'} {o.version} of the tokenizer graph "
                                  f"differs from the model's {opsets[o.domain]}")
    text_model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
                                   producer_name=model.producer_name, producer_version=model.producer_version)
    text_model.ir_version = model.ir_version
    text_model.doc_string = model.doc_string + "; strings in (tokenizer in the graph)"
    return text_model


def check_tokenizer(folder: Path, front_session, frames, cap: int) -> None:
    """Refuses the export when the in-graph tokenizer and tokenizer.json disagree on a PROBE_TEXTS text
    (the op's ids, its special tokens swapped for tokenizer.json's, against the ``tokenizers`` library;
    a row the op cut at ``cap`` ids (0: no cap) against as many of the library's)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    texts = PROBE_TEXTS
    (op_prefix, op_suffix), (prefix, suffix) = frames
    raw, mask = front_session.run(None, {"text": np.array(texts, dtype=object)})
    for text, row, row_mask in zip(texts, raw, mask):
        ids = row[row_mask == 1].tolist()
        body = ids[len(op_prefix):len(ids) - len(op_suffix)]
        want = tok.encode(text).ids
        if cap and len(ids) == cap:
            want = want[:len(prefix) + len(body)] + suffix
        if prefix + body + suffix != want:
            raise BitnetOnnxError(f"{folder / 'tokenizer.json'}: --text-input: the in-graph tokenizer gives "
                                  f"{ids} for {text!r}, the tokenizers library {want}; this tokenizer cannot run "
                                  "in the graph, export without --text-input")


def opset_of(model: onnx.ModelProto) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def save_text_model(folder: Path, pre: onnx.ModelProto, model: onnx.ModelProto) -> Path:
    """Writes ``pre`` + ``model`` as folder/model_text.onnx. Call after model.onnx was saved from ``model``:
    weights that went to external data are then references to the same file, not a second copy."""
    path = folder / TEXT_MODEL_NAME
    onnx.save_model(compose(pre, model), str(path))
    return path


def text_input_for(tokenizer_dir: Path, manifest: Manifest, model: onnx.ModelProto) -> onnx.ModelProto:
    """The exporter's step: the pre-processing graph for ``model``, and the manifest's text fields set."""
    pools_without_prompt = any(i.name == PROMPT_LENGTH_INPUT for i in model.graph.input)
    pre = preprocess_model(Path(tokenizer_dir), manifest, opset_of(model), model.ir_version, pools_without_prompt)
    manifest.text_model_file = TEXT_MODEL_NAME
    manifest.text_custom_ops = sorted({n.op_type for n in pre.graph.node if n.domain == customops.DOMAIN})
    manifest.text_needs_extensions = any(n.domain == EXTENSIONS_DOMAIN for n in pre.graph.node)
    return pre
