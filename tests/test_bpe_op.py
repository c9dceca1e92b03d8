"""ByteFallbackBpe through onnxruntime vs the HF ``tokenizers`` library (encode, no special tokens).

- ids: the REAL Gemma3 tokenizer (bitnet_onnx.testing.real_tokenizers) on a varied corpus of >= 300
  texts (whitespace runs, tabs, CRLF, code, URLs, numbers, NFC/NFD accents, CJK and Korean runs,
  Arabic, emoji ZWJ sequences and flags, zero-width characters, added tokens inside the text,
  empty and 50k-character texts, and the texts onnxruntime-extensions gets wrong), the factory's
  Gemma3 tokenizer, and small tokenizers built with the library that reach the corners: unk with
  and without fusing, partial byte tables, no unk token, holes in the ids, repeated merges,
  overlapping added tokens and added tokens outside the vocab;
- max_length: each row is the prefix of the uncapped ids;
- bad input (invalid UTF-8, rank 2, empty batches) and bad attributes: clear errors or defined shapes;
- bpe_node refuses tokenizer.json files outside the family (the real Qwen3 one, and one field
  changed at a time), and ``supports`` agrees.
Contract: docs/op.md (ByteFallbackBpe).
"""

from __future__ import annotations

import copy
import json
import random
import re
import unicodedata

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from bitnet_onnx import customops
from bitnet_onnx.customops.byte_fallback_bpe import NAME, bpe_node, supports
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.testing.real_tokenizers import VARIED_CORPUS, real_tokenizer_dir

tokenizers = pytest.importorskip("tokenizers")

OUTPUTS = ["input_ids", "attention_mask"]


# -- graphs and sessions ------------------------------------------------------------------------
def _model(node: onnx.NodeProto) -> bytes:
    graph = helper.make_graph(
        [node], "bpe", [helper.make_tensor_value_info("text", TensorProto.STRING, [None])],
        [helper.make_tensor_value_info(name, TensorProto.INT64, [None, None]) for name in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(customops.DOMAIN, customops.DOMAIN_VERSION)])
    model.ir_version = 10
    return model.SerializeToString()


def _session(node: onnx.NodeProto, threads: int = 1) -> ort.InferenceSession:
    return ort.InferenceSession(_model(node), customops.session_options(threads=threads),
                                providers=["CPUExecutionProvider"])


def _with_max_length(node: onnx.NodeProto, max_length: int) -> onnx.NodeProto:
    capped = copy.deepcopy(node)
    for attr in capped.attribute:
        if attr.name == "max_length":
            attr.i = max_length
    return capped


def _run(session: ort.InferenceSession, texts) -> list[list[int]]:
    """Each row's ids; checks the padding contract (mask 1...1 0...0, ids 0 on padding, S = longest row)."""
    ids, mask = session.run(None, {"text": np.array(texts, dtype=object)})
    assert ids.dtype == np.int64 and mask.dtype == np.int64 and ids.shape == mask.shape == (len(texts), ids.shape[1])
    lengths = mask.sum(axis=1)
    assert ids.shape[1] == (lengths.max() if len(texts) else 0)
    for row, n in zip(range(len(texts)), lengths):
        assert (mask[row, :n] == 1).all() and (mask[row, n:] == 0).all() and (ids[row, n:] == 0).all()
    return [ids[row, :n].tolist() for row, n in zip(range(len(texts)), lengths)]


def _hf_ids(tokenizer, texts) -> list[list[int]]:
    return [tokenizer.encode(t, add_special_tokens=False).ids for t in texts]


def _assert_same_ids(session, tokenizer, texts, batch: int = 16) -> None:
    for start in range(0, len(texts), batch):
        chunk = texts[start:start + batch]
        for text, got, want in zip(chunk, _run(session, chunk), _hf_ids(tokenizer, chunk)):
            assert got == want, f"text {text[:80]!r} (length {len(text)})"


# -- the corpus ---------------------------------------------------------------------------------
# Texts onnxruntime-extensions' HfJsonTokenizer gets wrong on Gemma3 (a final one-character word
# dropped; runs of more than 100 characters force-split).
EXTENSIONS_FAILURES = ["x ²", "x ² y", "} else { return -1; }", "x" * 3000, "a b", "I", " é", "東" * 150]
# Added tokens inside the text: special (<bos>, <start_of_turn>), whitespace runs, HTML tags.
WITH_ADDED_TOKENS = [
    "<bos>", "text<bos>more<eos>", "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "a\n\nb", "\n\n\n\n", "\n", "x  y   z", "   leading", "trailing\t\t", "<div>html</div>", "<divx>",
    "<table><tr><td>1</td></tr></table>", "<unused12><unk><mask>", "<0x41> literal byte token text",
    "▁already▁marked", "<bos><bos>", "< bos>", "<start_of_image>img<end_of_image>", "nul\x00byte",
]
_POOLS = {
    "words": ["the", "model", "embeds", "ternary", "weights", "fast", "ONNX", "Runtime", "text", "query", "a", "I"],
    "cjk": "敏捷的棕色狐狸跳过了懒狗今日はいい天気ですねカタカナ漢字東京中文",
    "korean": "빠른갈색여우가게으른개를뛰어넘는다한국어텍스트",
    "arabic": "مرحبا بالعالم كيف حالك اللغة العربية".split(),
    "accents": "éèêëàâäôöûüçñÉÀÇåøæœßğış",
    "emoji": ["👨\u200d👩\u200d👧", "👍🏽", "🇫🇷", "🇯🇵", "🏳\ufe0f\u200d🌈", "😶\u200d🌫\ufe0f", "🚀", "✓", "🙂"],
    "zero_width": ["\u200b", "\u200c", "\u200d", "\ufeff", "\u2060"],
    "tags": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "\n\n", "  ", "\t\t", "<b>", "</td>", "<code>"],
}


def _generated(rng: random.Random, i: int) -> list[str]:
    """One text per category, random."""
    p = _POOLS
    sentence = " ".join(rng.choice(p["words"]) for _ in range(rng.randint(1, 12)))
    return [
        sentence + rng.choice([".", "!", "?", ""]),
        rng.choice(p["words"]) + " " * rng.randint(2, 40) + rng.choice(p["words"]) + " " * rng.randint(0, 5),
        "\t" * rng.randint(1, 6) + sentence + "\t" * rng.randint(0, 3),
        sentence.replace(" ", "\r\n", rng.randint(1, 3)) + "\r\n" * rng.randint(0, 2),
        f"def f{i}(x):\n{' ' * rng.choice([2, 4, 8])}return x * {rng.randint(0, 999)}  # {sentence}\n",
        f"https://example.com/{rng.choice(p['words'])}/{i}?q={sentence.replace(' ', '+')}&n={rng.randint(0, 99)}",
        " ".join(str(rng.randint(-10**9, 10**9)) for _ in range(rng.randint(1, 6))) + f" {rng.random():.6f}",
        "".join(rng.choice(p["cjk"]) for _ in range(rng.randint(1, 30))),
        "".join(rng.choice(p["korean"]) for _ in range(rng.randint(1, 20))),
        " ".join(rng.sample(p["arabic"], 3)),
        unicodedata.normalize(rng.choice(["NFC", "NFD"]), "".join(rng.choice(p["accents"]) for _ in range(8))),
        "".join(rng.choice(p["emoji"]) for _ in range(rng.randint(1, 6))) + " " + sentence,
        rng.choice(p["zero_width"]).join(sentence.split(" ")),
        "".join(rng.choice(p["tags"]) + rng.choice(p["words"]) for _ in range(rng.randint(1, 6))),
    ]


def gemma_corpus(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = list(VARIED_CORPUS) + EXTENSIONS_FAILURES + WITH_ADDED_TOKENS
    for i in range(20):
        out += _generated(rng, i)
    out += [
        "".join(rng.choice(_POOLS["cjk"]) for _ in range(400)),       # CJK run without spaces
        "".join(rng.choice(_POOLS["korean"]) for _ in range(300)),
        "".join(rng.choice(_POOLS["emoji"]) for _ in range(200)),
        "x" * 50_000,                                                  # 50k characters
        ("The café 東京 🙂 x ² y\tok  <b>bold</b>\n\n" * 1500)[:50_000],
        "".join(rng.choice(_POOLS["cjk"]) for _ in range(50_000)),
    ]
    return out


CORPUS = gemma_corpus()


def test_corpus_is_varied():
    assert len(CORPUS) >= 300
    assert "" in CORPUS and sum(len(t) >= 50_000 for t in CORPUS) >= 3
    assert any(unicodedata.normalize("NFC", t) != t for t in CORPUS)  # NFD accents
    assert all(t in CORPUS for t in ("x ²", "x ² y", "} else { return -1; }", "x" * 3000, "<bos>", "a\n\nb"))


# -- the real Gemma3 tokenizer ------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_gemma3():
    """(tokenizer.json path, parsed json, node, 2-thread session, HF tokenizer): the 262k vocab, built once."""
    path = real_tokenizer_dir("gemma3") / "tokenizer.json"
    parsed = json.loads(path.read_text(encoding="utf-8"))
    node = bpe_node(parsed, path, "text", OUTPUTS, max_length=0)
    return path, parsed, node, _session(node, threads=2), tokenizers.Tokenizer.from_file(str(path))


def test_real_gemma3_ids_equal_tokenizers(real_gemma3):
    path, parsed, node, session, hf = real_gemma3
    assert supports(parsed)
    _assert_same_ids(session, hf, CORPUS)


def test_real_gemma3_max_length_is_the_prefix(real_gemma3):
    *_, node, _, hf = real_gemma3
    texts = [t for t in CORPUS if len(t) < 5000]
    capped = _session(_with_max_length(node, 7))
    full = _hf_ids(hf, texts)
    assert max(map(len, full)) > 7
    for start in range(0, len(texts), 32):
        for got, want in zip(_run(capped, texts[start:start + 32]), full[start:start + 32]):
            assert got == want[:7]


# -- the factory's Gemma3 tokenizer -------------------------------------------------------------
@pytest.fixture(scope="module")
def factory_gemma3(tiny_model):
    path = tiny_model("gemma3") / "tokenizer.json"
    parsed = json.loads(path.read_text(encoding="utf-8"))
    return path, parsed, bpe_node(parsed, path, "text", OUTPUTS, max_length=0), tokenizers.Tokenizer.from_file(str(path))


def test_factory_gemma3_ids_equal_tokenizers(factory_gemma3):
    path, parsed, node, hf = factory_gemma3
    assert supports(parsed)
    _assert_same_ids(_session(node), hf, CORPUS)


@pytest.mark.parametrize("max_length", [1, 3, 16])
def test_max_length_is_the_prefix(factory_gemma3, max_length):
    *_, node, hf = factory_gemma3
    texts = CORPUS[:120] + ["<bos>" * 20, "x  " * 30]  # rows cut inside a segment and at an added token
    got = _run(_session(_with_max_length(node, max_length)), texts)
    assert got == [ids[:max_length] for ids in _hf_ids(hf, texts)]


# -- corner cases, with tokenizers built by the library -----------------------------------------
def _corner_tokenizer(byte_fallback: bool, fuse_unk: bool, unk: bool, all_bytes: bool, holes: bool) -> dict:
    """A small tokenizer.json of the family, from the library itself (its own added-token ids)."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

    chars = ["▁", "a", "b", "c", "é", "𝄞", "!"]
    merged = [("a", "b"), ("b", "c"), ("ab", "c"), ("▁", "a"), ("a", "a"), ("aa", "a"), ("c", "a"), ("é", "▁"),
              ("▁a", "b"), ("𝄞", "𝄞"), ("a", "b")]  # a repeated pair: its last rank counts
    byte_values = range(256) if all_bytes else [*range(0x80), 0xC3]  # é's first byte only: é falls back to unk
    tokens = ["<unk>", "<s>"] + [f"<0x{b:02X}>" for b in byte_values] + chars
    for left, right in merged:
        if left + right not in tokens:
            tokens.append(left + right)
    vocab = {t: (3 * i + 5 if holes else i) for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merged, unk_token="<unk>" if unk else None, fuse_unk=fuse_unk,
                               byte_fallback=byte_fallback))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    # Overlapping added tokens (leftmost-longest), some in the vocab ("<s>", "ab"), some not.
    tok.add_special_tokens([AddedToken("<s>", special=True, normalized=False)])
    tok.add_tokens([AddedToken(t, normalized=False) for t in ("xy", "xyz", "yz", "ab", "\n\n", "  ", "a b")])
    return json.loads(tok.to_str())


def _corner_texts(seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = ["a", "b", "c", " ", "é", "𝄞", "!", "x", "y", "z", "w", "€", "<s>", "\n", "日", "ab", "aa", "a b"]
    texts = ["", " ", "abc", "aaa aaa", "xyz", "wxyz", "xyzz", "€日€x", "é é", "𝄞𝄞𝄞", "<s><s>ab", "a  b", "\n\n\n"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(150)]
    return texts


@pytest.mark.parametrize("holes", [False, True], ids=["dense_ids", "holes"])
@pytest.mark.parametrize("all_bytes", [True, False], ids=["all_bytes", "ascii_bytes"])
@pytest.mark.parametrize("unk", [True, False], ids=["unk", "no_unk"])
@pytest.mark.parametrize("fuse_unk", [True, False], ids=["fuse", "no_fuse"])
@pytest.mark.parametrize("byte_fallback", [True, False], ids=["fallback", "no_fallback"])
def test_corners_equal_tokenizers(byte_fallback, fuse_unk, unk, all_bytes, holes):
    parsed = _corner_tokenizer(byte_fallback, fuse_unk, unk, all_bytes, holes)
    assert supports(parsed)
    node = bpe_node(parsed, "corner/tokenizer.json", "text", OUTPUTS, max_length=0)
    assert any(a.name == "vocab_ids" for a in node.attribute) == holes
    hf = tokenizers.Tokenizer.from_str(json.dumps(parsed))
    texts = _corner_texts(seed=sum(flag << k for k, flag in enumerate((byte_fallback, fuse_unk, unk, all_bytes, holes))))
    assert _run(_session(node), texts) == _hf_ids(hf, texts)


def test_legacy_merge_strings_give_the_same_node(factory_gemma3):
    path, parsed, node, _ = factory_gemma3
    legacy = copy.deepcopy(parsed)
    legacy["model"]["merges"] = ["#version: 0.2"] + [" ".join(m) if isinstance(m, list) else m
                                                     for m in parsed["model"]["merges"]]
    assert bpe_node(legacy, path, "text", OUTPUTS, max_length=0) == node


# -- bad input ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def factory_session(factory_gemma3):
    return _session(factory_gemma3[2], threads=2)


@pytest.mark.parametrize("raw, problem, at", [
    # the wording of NormalizeNFC's (tests/test_nfc_op.py): one decoder, customops/kernels/text/utf8.h
    (b"ab\xffcd", "invalid byte", 2),
    (b"ok\xc3", "sequence cut off by the end of the text", 2),
    (b"\xe2\x96x", "missing continuation byte", 0),
    (b"a\x80", "unexpected continuation byte", 1),
    (b"\xc0\xaf", "overlong encoding", 0),
    (b"\xe0\x80\xaf", "overlong encoding", 0),
    (b"x\xed\xa0\x80", "encoded surrogate", 1),
    (b"\xf4\x90\x80\x80", "code point beyond U+10FFFF", 0),
])
def test_invalid_utf8_is_a_clear_error(factory_session, raw, problem, at):
    # Bytes reach the op as they are; wider than every element: onnxruntime reads each one up to a NUL.
    texts = np.array([b"fine", raw], dtype="S16")
    message = rf"{NAME} node .*input 'text' row 1 is not valid UTF-8: {re.escape(problem)} at byte {at}"
    with pytest.raises(Exception, match=message):
        factory_session.run(None, {"text": texts})


def test_empty_batches_have_defined_shapes(factory_session):
    for texts, shape in (([], (0, 0)), ([""], (1, 0)), (["", ""], (2, 0))):
        ids, mask = factory_session.run(None, {"text": np.array(texts, dtype=object).reshape(-1)})
        assert ids.shape == mask.shape == shape


def test_text_must_be_1d(factory_gemma3):
    node = factory_gemma3[2]
    graph = helper.make_graph([node], "bpe", [helper.make_tensor_value_info("text", TensorProto.STRING, None)],
                              [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in OUTPUTS])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(customops.DOMAIN, 1)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), customops.session_options(threads=1))
    with pytest.raises(Exception, match=r"input 'text' must be 1-D \[N\], got shape \[1, 2\]"):
        session.run(None, {"text": np.array([["a", "b"]], dtype=object)})


# -- bad attributes -----------------------------------------------------------------------------
def _raw_node(**overrides) -> onnx.NodeProto:
    """A tiny hand-made node: vocab a, b, ab, <unk>; merge (a, b); added token <s> -> 9."""
    def strings(name, values):
        return helper.make_tensor(name, TensorProto.STRING, [len(values)], [v.encode() for v in values])

    attrs = {"vocab": strings("vocab", ["a", "b", "ab", "<unk>"]), "merges": [0, 1], "unk_id": 3,
             "added_tokens": strings("added_tokens", ["<s>"]), "added_token_ids": [9], "fuse_unk": 1,
             "byte_fallback": 1, "space_replacement": "\u2581", "max_length": 0}
    attrs.update(overrides)
    return helper.make_node(NAME, ["text"], OUTPUTS, name="bpe", domain=customops.DOMAIN,
                            **{k: v for k, v in attrs.items() if v is not None})


def test_hand_made_tables_tokenize():
    ids = _run(_session(_raw_node()), ["ab<s>ba", "abz", "", "a b"])
    assert ids == [[2, 9, 1, 0], [2, 3], [], [0, 3, 1]]  # "▁" is unknown: unk (no byte tokens)


@pytest.mark.parametrize("overrides, message", [
    ({"vocab": None}, "attribute 'vocab' must be set to a 1-D string tensor"),
    ({"vocab": helper.make_tensor("vocab", TensorProto.INT64, [2], [1, 2])}, "attribute 'vocab' must be a 1-D string tensor"),
    ({"merges": [0, 1, 2]}, "attribute 'merges': has an odd number of ids"),
    ({"merges": [0, 7]}, "attribute 'merges': pair 0 has id 7, which no vocab token has"),
    ({"merges": [0, 1, 1, 0]}, "attribute 'merges': pair 1 \\('b', 'a'\\): 'ba' is not in the vocab"),
    ({"unk_id": 4}, "attribute 'unk_id': 4 is neither -1"),
    ({"vocab_ids": [0, 1, 2]}, "attribute 'vocab_ids': has 3 ids for 4 vocab tokens"),
    ({"vocab_ids": [0, 1, 1, 3]}, "attribute 'vocab_ids': id 1 is given to two vocab tokens"),
    ({"vocab_ids": [0, 1, 2, -5]}, "attribute 'vocab_ids': id -5 is outside"),
    ({"added_token_ids": [9, 10]}, "attribute 'added_token_ids': has 2 ids for 1 added tokens"),
    ({"added_token_ids": None}, "attribute 'added_tokens' is set but 'added_token_ids' is not"),
    ({"added_token_ids": [-1]}, "attribute 'added_token_ids': id -1 is outside"),
    ({"fuse_unk": 2}, "attribute 'fuse_unk' must be 0 or 1"),
    ({"max_length": -1}, "attribute 'max_length' must be >= 0"),
    ({"space_replacement": b"\xe2\x96"}, "attribute 'space_replacement': is not valid UTF-8"),
])
def test_bad_attributes_are_refused_when_the_kernel_is_created(overrides, message):
    with pytest.raises(Exception, match=rf"{NAME} node 'bpe': {message}"):
        _session(_raw_node(**overrides))


def test_schema_checks_and_infers():
    customops.register_onnx_schema()
    model = onnx.load_from_string(_model(_raw_node()))
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    out = {v.name: v for v in inferred.graph.output}["input_ids"].type.tensor_type
    assert out.elem_type == TensorProto.INT64 and len(out.shape.dim) == 2


# -- refusals -----------------------------------------------------------------------------------
def test_real_qwen3_is_refused():
    path = real_tokenizer_dir("qwen3") / "tokenizer.json"
    parsed = json.loads(path.read_text(encoding="utf-8"))
    assert not supports(parsed)
    with pytest.raises(BitnetOnnxError, match=rf"{re.escape(str(path))}: normalizer: must be Replace.*got 'NFC'"):
        bpe_node(parsed, path, "text", OUTPUTS, max_length=0)


def _set(path: str, value):
    def change(tok: dict) -> None:
        *parents, last = path.split(".")
        target = tok
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value
    return change


OUT_OF_FAMILY = [
    (_set("normalizer", {"type": "NFC"}), "normalizer"),
    (_set("normalizer", {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                             {"type": "Replace", "pattern": {"String": " "},
                                                              "content": "▁"}]}), "normalizer"),
    (_set("normalizer.pattern", {"Regex": " "}), "normalizer"),
    (_set("normalizer.content", "_ _"), "normalizer"),
    (_set("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                            "use_regex": True}), "pre_tokenizer"),
    (_set("pre_tokenizer", {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}),
     "pre_tokenizer"),
    (_set("pre_tokenizer.invert", True), "pre_tokenizer"),
    (_set("model.type", "WordPiece"), "model.type"),
    (_set("model.dropout", 0.1), "model.dropout"),
    (_set("model.continuing_subword_prefix", "##"), "model.continuing_subword_prefix"),
    (_set("model.end_of_word_suffix", "</w>"), "model.end_of_word_suffix"),
    (_set("model.ignore_merges", True), "model.ignore_merges"),
    (_set("model.unk_token", "<nope>"), "model.unk_token"),
    (_set("model.merges.0", ["▁", "no-such-token"]), "model.merges\\[0\\]"),
    (_set("model.merges.0", "a b c"), "model.merges\\[0\\]"),
    (_set("added_tokens.0.normalized", True), "added_tokens\\[0\\].normalized"),
    (_set("added_tokens.0.lstrip", True), "added_tokens\\[0\\].lstrip"),
    (_set("added_tokens.0.rstrip", True), "added_tokens\\[0\\].rstrip"),
    (_set("added_tokens.0.single_word", True), "added_tokens\\[0\\].single_word"),
    (_set("added_tokens.0.id", 12345), "added_tokens\\[0\\].id"),
]


@pytest.mark.parametrize("change, field", OUT_OF_FAMILY, ids=[f for _, f in OUT_OF_FAMILY])
def test_out_of_family_is_refused(factory_gemma3, change, field):
    path, parsed, *_ = factory_gemma3
    changed = copy.deepcopy(parsed)
    change(changed)
    assert not supports(changed)
    with pytest.raises(BitnetOnnxError, match=rf"^{re.escape(str(path))}: {field}"):
        bpe_node(changed, path, "text", OUTPUTS, max_length=0)


def test_null_pre_tokenizer_and_sequence_wrappers_are_the_family(factory_gemma3):
    path, parsed, node, _ = factory_gemma3
    for pre_tokenizer in (None, {"type": "Sequence", "pretokenizers": [parsed["pre_tokenizer"]]}):
        changed = dict(parsed, pre_tokenizer=pre_tokenizer,
                       normalizer={"type": "Sequence", "normalizers": [parsed["normalizer"]]})
        assert supports(changed)
        assert bpe_node(changed, path, "text", OUTPUTS, max_length=0) == node


def test_bpe_node_arguments_are_checked(factory_gemma3):
    path, parsed, *_ = factory_gemma3
    with pytest.raises(BitnetOnnxError, match="max_length must be an integer >= 0"):
        bpe_node(parsed, path, "text", OUTPUTS, max_length=-1)
    with pytest.raises(BitnetOnnxError, match="output_names must be"):
        bpe_node(parsed, path, "text", ["ids"], max_length=0)
