"""Over-long texts: truncation keeps the special tokens and cuts the text, as transformers does
(bitnet_onnx.special_tokens), in the runtime, the strings-in graph and the HF layout's tokenizer.json;
and an export parses tokenizer.json once (bitnet_onnx.tokenizer_json).

The references are transformers' own tokenizers (``AutoTokenizer``, ``truncation=True, max_length=N``,
what sentence-transformers calls) on the REAL tokenizers (bitnet_onnx.testing.real_tokenizers):
Qwen3's with the EOS rule as its post-processor (Qwen3-Embedding's tokenizer.json, and what the HF
layout writes), Gemma3's as released with the 270M model (``<bos>`` only) and as embedding models
ship it (``<bos> ... <eos>``, the ``<eos>`` an over-long text used to lose).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from bitnet_onnx import customops, special_tokens
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.export import exporter, hf_layout, text_input
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.tokenization import TextTokenizer
from bitnet_onnx.special_tokens import IdsRule, SpecialTokens
from bitnet_onnx.testing.real_tokenizers import real_tokenizer_dir

MAX_LENGTH = 40
# longer than MAX_LENGTH tokens in both tokenizers, each in another script or shape
OVER_LONG = [
    "The quick brown fox jumps over the lazy dog. " * 30,
    "敏捷的棕色狐狸跳过了懒狗。今日はいい天気ですね。" * 20,
    "word " * 900,
    "x" * 3000,
    "def embed(texts):\n    return [model(t) for t in texts]  # code\n" * 12,
    "café naïve résumé 東京 🙂 " * 30 + "<eos> <bos> <|endoftext|>",
]
WITHIN = ["", "a", "What is BitNet?", "Ternary weights make matrix products cheap. " * 3, "<bos> inside <eos>"]
TEXTS = OVER_LONG + WITHIN
# cases: name -> (tokenizer folder builder, arch, manifest's EOS token)
CASES = (*ARCHITECTURES, "gemma3-eos")


def _gemma3_with_eos(folder: Path) -> Path:
    """The real Gemma3 tokenizer as embedding models ship it: the post-processor adds <eos> too."""
    src = real_tokenizer_dir("gemma3")
    tok = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    tok["post_processor"]["single"].append({"SpecialToken": {"id": "<eos>", "type_id": 0}})
    config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["add_eos_token"] = True
    folder.mkdir(parents=True)
    (folder / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return folder


def _manifest(folder: Path, arch: str) -> Manifest:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    qwen = arch == "qwen3"
    return Manifest(arch=arch, weights="i2s", pooling="lasttoken" if qwen else "mean", normalize=True,
                    dimension=8, hidden_size=8, max_length=MAX_LENGTH, padding_side="right",
                    pad_token_id=tok.token_to_id("<|endoftext|>" if qwen else "<pad>"),
                    append_eos_token_id=tok.token_to_id("<|endoftext|>") if qwen else None)


def _layout(src: Path, dest: Path, manifest: Manifest) -> Path:
    """The HF layout's tokenizer files of ``src`` (export --layout hf writes them by these functions)."""
    dest.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(src / name, dest / name)
    tok = hf_layout.add_eos_rule(dest / "tokenizer.json", manifest)
    hf_layout.update_tokenizer_config(dest / "tokenizer_config.json", dest / "tokenizer.json", tok, manifest)
    return dest


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """case -> (source tokenizer folder, its manifest, its HF-layout tokenizer folder)."""
    root = tmp_path_factory.mktemp("truncation")
    out = {}
    for case in CASES:
        arch = case.split("-")[0]
        src = _gemma3_with_eos(root / case) if case == "gemma3-eos" else real_tokenizer_dir(arch)
        manifest = _manifest(src, arch)
        out[case] = (src, manifest, _layout(src, root / f"{case}-layout", manifest))
    return out


def _transformers_ids(folder: Path, texts, **kwargs) -> list[list[int]]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))(list(texts), **kwargs)["input_ids"]


def _session(model) -> ort.InferenceSession:
    so = customops.session_options(threads=1, extensions=True)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("case", CASES)
def test_runtime_equals_transformers(folders, case):
    """Every id, over-long texts and short ones: transformers on the tokenizer files a user of the
    model has (Qwen3: with its EOS post-processor, the HF layout's; Gemma3: the source's)."""
    src, manifest, layout = folders[case]
    runtime = TextTokenizer(src / "tokenizer.json", manifest)
    got = runtime.tokenize(TEXTS)
    reference = layout if case == "qwen3" else src
    want = _transformers_ids(reference, TEXTS, truncation=True, max_length=MAX_LENGTH)
    for text, g, w in zip(TEXTS, got, want):
        assert g == w, (case, text[:60], g, w)
    for ids in got[:len(OVER_LONG)]:
        assert len(ids) == MAX_LENGTH
    if case != "gemma3":  # the trailing EOS an over-long text keeps (the issue)
        eos = manifest.append_eos_token_id if case == "qwen3" else runtime._tok.token_to_id("<eos>")
        assert all(ids[-1] == eos for ids in got[:len(OVER_LONG)])
    assert runtime.prepare_ids(got) == got  # a caller's ids of these keep their special tokens


@pytest.mark.parametrize("case", CASES)
def test_layout_tokenizer_json_truncates_the_same(folders, case):
    """The HF layout's tokenizer.json alone, in the ``tokenizers`` library (fastembed's reader) and in
    transformers at its model_max_length, gives the runtime's ids; the runtime on that file too."""
    from tokenizers import Tokenizer

    src, manifest, layout = folders[case]
    runtime = TextTokenizer(src / "tokenizer.json", manifest).tokenize(TEXTS)
    plain = [e.ids for e in Tokenizer.from_file(str(layout / "tokenizer.json")).encode_batch(TEXTS)]
    # a text ending in "<|endoftext|>" keeps that token and gets the layout's: not in TEXTS' within ones
    assert plain == runtime
    assert _transformers_ids(layout, TEXTS, truncation=True) == runtime
    assert TextTokenizer(layout / "tokenizer.json", manifest).tokenize(TEXTS) == runtime
    assert json.loads((layout / "tokenizer.json").read_text(encoding="utf-8"))["truncation"]["max_length"] == MAX_LENGTH


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.slow
def test_strings_in_graph_equals_runtime(folders, case, side):
    """The strings-in graph's input_ids / attention_mask are the runtime's, padded, for a batch of
    over-long and short texts."""
    src, manifest, _ = folders[case]
    manifest = dataclasses.replace(manifest, padding_side=side)
    session = _session(text_input.preprocess_model(src, manifest, 21, 10))
    texts = TEXTS + ["already ends<|endoftext|>", "ends <eos>"]
    ids, mask = session.run(["input_ids", "attention_mask"], {"text": np.array(texts, dtype=object)})
    want_ids, want_mask = TextTokenizer(src / "tokenizer.json", manifest).encode(texts)
    assert ids.tolist() == want_ids.tolist() and mask.tolist() == want_mask.tolist()


def test_special_tokens_of_every_post_processor():
    """The rule reads each post-processor type of the tokenizers library (and a Sequence of them)."""
    from tokenizers import Tokenizer, models, processors

    def frame(processor):
        tok = Tokenizer(models.WordLevel({"[CLS]": 0, "[SEP]": 1, "a": 2, "<s>": 3, "</s>": 4}, unk_token="a"))
        tok.post_processor = processor
        return special_tokens.of_library(tok)

    assert frame(None) == SpecialTokens()
    assert frame(processors.ByteLevel()) == SpecialTokens()
    assert frame(processors.BertProcessing(("[SEP]", 1), ("[CLS]", 0))) == SpecialTokens((0,), (1,))
    assert frame(processors.RobertaProcessing(("</s>", 4), ("<s>", 3))) == SpecialTokens((3,), (4,))
    template = processors.TemplateProcessing(single="<s> [CLS] $A [SEP]", special_tokens=[("<s>", 3), ("[CLS]", 0),
                                                                                           ("[SEP]", 1)])
    assert frame(template) == SpecialTokens((3, 0), (1,))
    wrap = processors.TemplateProcessing(single="[CLS] $A </s>", special_tokens=[("[CLS]", 0), ("</s>", 4)])
    assert frame(processors.Sequence([processors.ByteLevel(), template, wrap])) == SpecialTokens((0, 3, 0), (1, 4))
    with pytest.raises(BitnetOnnxError, match="tok.json: post_processor type 'Nope'"):
        special_tokens.of_post_processor({"type": "Nope"}, "tok.json")
    with pytest.raises(BitnetOnnxError, match="names special token '<x>' without its ids"):
        special_tokens.of_post_processor({"type": "TemplateProcessing", "single": [
            {"SpecialToken": {"id": "<x>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]})


def test_ids_rule():
    """transformers' rule: the text cut to max_length less the special tokens; the EOS rule's token
    after the suffix unless it ends with it; a text's own trailing EOS is the rule's."""
    bos, eos, sep = 1, 2, 3
    rule = IdsRule(SpecialTokens((bos,), (sep,)), eos, 6)
    assert rule.ends == SpecialTokens((bos,), (sep, eos)) and rule.text_room == 3
    assert rule.apply([bos, 10, 11, 12, 13, 14, sep]) == ([bos, 10, 11, 12, sep, eos], True)
    assert rule.apply([bos, 10, 11, 12, sep, eos]) == ([bos, 10, 11, 12, sep, eos], False)
    assert rule.apply([bos, 10, eos, sep]) == ([bos, 10, sep, eos], False)
    assert rule.apply([10, 11, 12, 13, 14, 15]) == ([10, 11, 12, 13, 14, eos], True)  # no specials: none added
    assert IdsRule(SpecialTokens((), (eos,)), eos, 3).apply([10, eos, eos]) == ([10, eos], False)
    assert IdsRule(SpecialTokens(), None, 2).apply([10, 11, 12]) == ([10, 11], True)
    with pytest.raises(BitnetOnnxError, match="m.json: max_length 2 leaves no room for the 3 special tokens"):
        rule = IdsRule(SpecialTokens((bos,), (sep,)), eos, 2)
        rule.check("m.json")


# -- tokenizer.json parsed once per export (issue 28 item 8) -----------------------------------------
class _CountingTokenizer:
    """``tokenizers.Tokenizer`` with its constructors (from_file, from_str, from_buffer) counted."""

    def __init__(self, real):
        self.real, self.parses = real, []

    def __getattr__(self, name):
        attr = getattr(self.real, name)
        if not name.startswith("from_"):
            return attr

        def counted(*args, **kwargs):
            self.parses.append(name)
            return attr(*args, **kwargs)
        return counted


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_text_input_export_parses_tokenizer_json_once(tiny_model, tmp_path, monkeypatch, arch):
    """``export --text-input``: one JSON parse and one ``tokenizers`` parse of tokenizer.json (the facts,
    the tokenizer node, the probe and the ids rules share them), and the export is whole."""
    import tokenizers

    model = tiny_model(arch)
    size = len((model / "tokenizer.json").read_text(encoding="utf-8"))
    counting = _CountingTokenizer(tokenizers.Tokenizer)
    monkeypatch.setattr(tokenizers, "Tokenizer", counting)
    real_loads, json_parses = json.loads, []

    def loads(s, *args, **kwargs):
        if len(s) >= size:
            json_parses.append(len(s))
        return real_loads(s, *args, **kwargs)
    monkeypatch.setattr(json, "loads", loads)
    out = exporter.export(model, tmp_path / "out", text_input=True)
    assert counting.parses == ["from_str"] and len(json_parses) == 1
    assert Manifest.read(out).text_model_file
