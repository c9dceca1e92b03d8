"""Strings in, embeddings out: the tokenizer and the manifest's rules as ONNX in front of the model.

``bitnet-onnx export --text-input`` writes, next to ``model.onnx`` (ids in), ``model_text.onnx``: the
same model (same weights, same external data file) behind a pre-processing graph

    text: string [N], prompt: string [1] (optional, default: the manifest's default prompt or "")
      -> StringConcat(prompt, text)
      -> UTF-8 guard: bytes that are not UTF-8 (or U+0000) are an ORT error naming the reason
      -> NFC guard (tokenizers whose normalizer is NFC): a text that NFC would change is an error
      -> onnxruntime-extensions' HfJsonTokenizer, built from tokenizer.json + tokenizer_config.json
         by the extensions' own ``gen_processing_models``
      -> the special tokens of tokenizer.json's post-processor, the EOS rule, truncation to
         max_length, the mask from the true lengths, padding on the manifest's side
      -> the model: sentence_embedding, token_embeddings, plus input_ids and attention_mask.

The two graphs are joined by ``onnx.compose.merge_graphs``. The export runs the extensions'
tokenizer on a probe corpus against the ``tokenizers`` library and refuses when they differ (so
Gemma3's real tokenizer is refused: docs/hosts.md).

NFC: the extensions' tokenizer does not apply tokenizer.json's NFC normalizer, and ONNX Runtime
has no Unicode normalization op. The graph therefore rejects every text that NFC would change,
found by RE2 patterns (``nfc_unstable_patterns``, RegexFullMatch) built from Python's Unicode data;
on every text it accepts the ids equal the ``tokenizers`` library's. Hosts normalize to NFC first
(one library call in every language); ``Embedder`` does.
"""

from __future__ import annotations

import json
import os
import unicodedata
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bitnet_onnx import customops
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import PROMPT_INPUT, PROMPT_LENGTH_INPUT, TEXT_INPUT, TEXT_MODEL_NAME, Manifest
from bitnet_onnx.export.builder import GraphBuilder

INT64 = TensorProto.INT64
IDS, MASK = "input_ids", "attention_mask"
MODEL_OUTPUTS = ("sentence_embedding", "token_embeddings")
EXTENSIONS_DOMAIN = "ai.onnx.contrib"
TOKENIZER_OP = "HfJsonTokenizer"
NORMALIZERS_IN_GRAPH = {"Replace"}  # applied by the extensions' tokenizer (checked by the probe corpus)
UTF8_GUARD_NAME = "/text_input/utf8_guard: a text is not valid UTF-8 or holds U+0000"
# Unicode scalar values but U+0000, which the extensions' tokenizer takes for the end of the text
UTF8_PATTERN = r"(?s)[\x{1}-\x{D7FF}\x{E000}-\x{10FFFF}]*"
PROTOBUF_ENV = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
PATTERN_CHARS = 12000  # per RegexFullMatch pattern of the NFC guard
NFC_GUARD_NAME = ("/text_input/nfc_guard: a text is not in Unicode NFC (tokenizer.json normalizes to NFC, "
                  "the in-graph tokenizer does not); normalize texts to NFC before feeding them")

# Probe texts the export checks the in-graph ids on (the tests use a far larger corpus).
PROBE_TEXTS = [
    "", " ", "a", "Hello, world!", "  two  spaces\tand\ttabs\r\nCRLF\n\nlines  ", "x" * 40,
    "def f(x):\n    return x ** 2  # square", "https://example.com/a?b=1&c=%20", "3.14159 1,000,000 2025-06-01",
    "café naïve Ærø façade", "日本語のテキスト", "中文文本，标点。", "한국어 텍스트", "مرحبا بالعالم", "שלום עולם",
    "Привет, мир", "👩\u200d💻 🇫🇷 🏳️\u200d🌈", "zero\u200bwidth\u200cjoin\u200d", "<|endoftext|> <bos> <eos> <pad>",
    "\u00a0nbsp\u2003em\u3000ideographic", "ǅ ﬁ ① ²", "tab\tend\t", "} else { return -1; }",
    "y" * 150 + " long words",
]


# -- the NFC guard ------------------------------------------------------------------------------
def _cls(chars) -> str:
    """An RE2 character class of code points (ranges merged)."""
    cps = sorted(set(chars))
    parts, start = [], None
    for i, cp in enumerate(cps):
        if start is None:
            start = cp
        if i + 1 == len(cps) or cps[i + 1] != cp + 1:
            parts.append(f"\\x{{{start:X}}}" if start == cp else f"\\x{{{start:X}}}-\\x{{{cp:X}}}")
            start = None
    return "[" + "".join(parts) + "]"


def _tail_ccc(ch: str) -> int:
    """Combining class of the last character of ``ch``'s canonical decomposition (its own for marks)."""
    return unicodedata.combining(unicodedata.normalize("NFD", ch)[-1])


@lru_cache(maxsize=1)
def nfc_unstable_patterns(max_chars: int = PATTERN_CHARS) -> tuple[str, ...]:
    """RE2 patterns that together find a place where NFC changes a text; none matches an NFC text.

    The alternatives: a character NFC always replaces (Quick_Check=No); a combining mark after a
    mark of a higher class (canonical order broken; a precomposed character counts with the class of
    the last mark of its decomposition); a starter, marks of lower classes, then a mark NFC composes
    with that starter (a primary composite); Hangul L+V and LV+T jamo. Split into patterns of at most
    ``max_chars`` so that each compiles to a small automaton (RE2's DFA has a memory budget).
    """
    changed, precomposed, marks, pairs = [], [], {}, {}
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        if unicodedata.normalize("NFC", ch) != ch:
            changed.append(cp)
            continue
        if c := unicodedata.combining(ch):
            marks.setdefault(c, []).append(cp)
        elif _tail_ccc(ch):
            precomposed.append(cp)
        d = unicodedata.decomposition(ch)
        if d and not d.startswith("<") and len(d.split()) == 2:  # a primary composite: NFC composes its pair
            first, second = (int(x, 16) for x in d.split())
            pairs.setdefault(second, []).append(first)

    def lower(k: int) -> list[int]:
        return [cp for c in sorted(marks) if 0 < c < k for cp in marks[c]]

    alts = [_cls(changed)]
    alts += [_cls(marks[k]) + _cls(lower(k)) for k in sorted(marks) if lower(k)]  # marks out of order
    # A precomposed character, then marks of lower classes than its last mark: NFC decomposes and
    # reorders, then composes again; the result differs only for some marks (found by NFC itself).
    reordered: dict[tuple, list[int]] = {}
    for cp in precomposed:
        t = _tail_ccc(chr(cp))
        bad = tuple(m for m in lower(t) if unicodedata.normalize("NFC", chr(cp) + chr(m)) != chr(cp) + chr(m))
        if bad:
            reordered.setdefault((t, bad), []).append(cp)
    for (t, bad), cps in sorted(reordered.items()):
        alts.append(_cls(cps) + _cls(lower(t)) + "*" + _cls(bad))
    for mark, starters in sorted(pairs.items()):
        between = lower(unicodedata.combining(chr(mark)))
        alts.append(_cls(starters) + (_cls(between) + "*" if between else "") + f"\\x{{{mark:X}}}")
    lv = [cp for cp in range(0xAC00, 0xD7A4) if (cp - 0xAC00) % 28 == 0]
    alts += [r"[\x{1100}-\x{1112}][\x{1161}-\x{1175}]", _cls(lv) + r"[\x{11A8}-\x{11C2}]"]
    chunks: list[list[str]] = [[]]
    for alt in alts:
        if chunks[-1] and sum(map(len, chunks[-1])) + len(alt) > max_chars:
            chunks.append([])
        chunks[-1].append(alt)
    return tuple("(?s).*(?:" + "|".join(c) + ").*" for c in chunks)


def needs_nfc_guard(tokenizer_json: dict, source: Path) -> bool:
    """True when tokenizer.json normalizes to NFC; refuses normalizers the in-graph tokenizer lacks."""
    norm = tokenizer_json.get("normalizer")
    steps = [] if norm is None else norm.get("normalizers", []) if norm.get("type") == "Sequence" else [norm]
    nfc = False
    for step in steps:
        kind = step.get("type")
        if kind == "NFC":
            nfc = True
        elif kind not in NORMALIZERS_IN_GRAPH:
            raise BitnetOnnxError(f"{source}: --text-input: normalizer {kind!r} is not applied by "
                                  "onnxruntime-extensions' tokenizer; export without --text-input")
    return nfc


# -- the pre-processing graph -------------------------------------------------------------------
def tokenizer_node(folder: Path) -> onnx.NodeProto:
    """onnxruntime-extensions' HfJsonTokenizer node for the folder's tokenizer files, from its own API."""
    gen_processing_models = _extensions_api()

    vocab = (folder / "tokenizer.json").read_text(encoding="utf-8")
    cfg_file = folder / "tokenizer_config.json"
    config = cfg_file.read_text(encoding="utf-8") if cfg_file.is_file() else "{}"
    pre, _ = gen_processing_models(TOKENIZER_OP, pre_kwargs={"tokenizer_vocab": vocab, "tokenizer_config": config})
    (node,) = [n for n in pre.graph.node if n.op_type == TOKENIZER_OP]
    return node


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


def preprocess_model(folder: Path, manifest: Manifest, opset: int, ir_version: int) -> tuple[onnx.ModelProto, bool]:
    """The strings -> (input_ids, attention_mask) model and whether it has the NFC guard."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok_file = folder / "tokenizer.json"
    tok_json = json.loads(tok_file.read_text(encoding="utf-8"))
    nfc = needs_nfc_guard(tok_json, tok_file)
    node = tokenizer_node(folder)

    # The special tokens around a text: tokenizer.json's post-processor and the extensions' op.
    tok = Tokenizer.from_file(str(tok_file))
    tok.no_truncation()
    tok.no_padding()
    probe = "a"
    plain = tok.encode(probe, add_special_tokens=False).ids
    frame = _frame(tok.encode(probe, add_special_tokens=True).ids, plain)
    so = customops.session_options(extensions=True, op_library=False)
    so.log_severity_level = 3
    op_session = ort.InferenceSession(_op_only_model(node, opset, ir_version).SerializeToString(), so,
                                      providers=["CPUExecutionProvider"])
    op_ids = op_session.run(None, {"text": np.array([probe], dtype=object)})[0][0].tolist()
    op_frame = _frame(op_ids, plain)
    if frame is None or op_frame is None:
        raise BitnetOnnxError(f"{tok_file}: --text-input: onnxruntime-extensions' tokenizer gives {op_ids} for "
                              f"{probe!r}, tokenizer.json {tok.encode(probe).ids}; it cannot run in the graph")
    check_tokenizer(folder, op_session, (op_frame, frame), nfc)

    b = GraphBuilder(opset=opset)
    b.opsets[EXTENSIONS_DOMAIN] = 1  # the extensions register their ops at version 1
    text = b.add_input(TEXT_INPUT, TensorProto.STRING, ["batch"])
    prompt = b.add_input(PROMPT_INPUT, TensorProto.STRING, [1])
    b.initializers.append(numpy_helper.from_array(np.array([_default_prompt(manifest)], dtype=object), PROMPT_INPUT))
    with b.scope("text_input"):
        full = b.op("StringConcat", [prompt, text], name="prompt_and_text")
        # RE2 decodes UTF-8; bytes that are not UTF-8 (truncated, overlong, surrogates, > U+10FFFF)
        # match no class of code points.
        valid = b.op("RegexFullMatch", [full], pattern=UTF8_PATTERN, name="utf8_valid")
        full = _guard(b, full, b.op("Not", [valid]), UTF8_GUARD_NAME)
        if nfc:
            unstable = None
            for pattern in nfc_unstable_patterns():
                found = b.op("RegexFullMatch", [full], pattern=pattern, name="nfc_unstable")
                unstable = found if unstable is None else b.op("Or", [unstable, found])
            full = _guard(b, full, unstable, NFC_GUARD_NAME)
        raw, raw_mask = b.op(TOKENIZER_OP, [full], outputs=2, domain=EXTENSIONS_DOMAIN, name="tokenizer")
        b.nodes[-1].attribute.extend(node.attribute)
        ids, mask = _Rules(b, raw, raw_mask, manifest, op_frame, frame).build()
    b.add_output(ids, IDS, INT64, ["batch", "sequence"])
    b.add_output(mask, MASK, INT64, ["batch", "sequence"])
    model = b.model("bitnet_onnx_text_input", doc="texts -> input_ids, attention_mask")
    model.ir_version = ir_version
    _prefix_constants(model, "/text_input")
    return model, nfc


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


def _op_only_model(node: onnx.NodeProto, opset: int, ir_version: int) -> onnx.ModelProto:
    op = helper.make_node(TOKENIZER_OP, ["text"], ["ids", "mask"], domain=EXTENSIONS_DOMAIN)
    op.attribute.extend(node.attribute)
    graph = helper.make_graph([op], "tokenizer", [helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])],
                              [helper.make_tensor_value_info(name, INT64, ["N", "S"]) for name in ("ids", "mask")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(EXTENSIONS_DOMAIN, 1)])
    model.ir_version = ir_version
    return model


def compose(pre: onnx.ModelProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """``pre`` feeding ``model`` (one graph, by onnx.compose); the model's initializers are shared, not
    copied, when ``model`` already points at external data."""
    outputs = [o.name for o in model.graph.output if o.name in MODEL_OUTPUTS] + [IDS, MASK]
    graph = onnx.compose.merge_graphs(pre.graph, model.graph, io_map=[(IDS, IDS), (MASK, MASK)],
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


def check_tokenizer(folder: Path, op_session, frames, nfc: bool) -> None:
    """Refuses the export when the extensions' tokenizer and tokenizer.json disagree on a PROBE_TEXTS text
    (the op's ids, its special tokens swapped for tokenizer.json's, against the ``tokenizers`` library)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    texts = [unicodedata.normalize("NFC", t) if nfc else t for t in PROBE_TEXTS]
    (op_prefix, op_suffix), (prefix, suffix) = frames
    raw, mask = op_session.run(None, {"text": np.array(texts, dtype=object)})
    for text, row, row_mask in zip(texts, raw, mask):
        ids = row[row_mask == 1].tolist()
        body = ids[len(op_prefix):len(ids) - len(op_suffix)]
        want = tok.encode(text).ids
        if prefix + body + suffix != want:
            raise BitnetOnnxError(f"{folder / 'tokenizer.json'}: --text-input: onnxruntime-extensions' tokenizer gives "
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
    if any(i.name == PROMPT_LENGTH_INPUT for i in model.graph.input):
        raise BitnetOnnxError(f"{tokenizer_dir}: --text-input is not available for a model whose pooling leaves the "
                              "prompt out (include_prompt: false): export without --text-input")
    pre, nfc = preprocess_model(Path(tokenizer_dir), manifest, opset_of(model), model.ir_version)
    manifest.text_model_file, manifest.text_requires_nfc = TEXT_MODEL_NAME, nfc
    return pre
