"""TextTokenizer: the manifest's EOS, truncation and padding rules on the factory's Qwen3 and Gemma3 tokenizers."""

import json
import logging

import numpy as np
import pytest

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.tokenization import TextTokenizer


@pytest.fixture(scope="module")
def models(qwen3_bitnet, gemma3_bitnet):
    """Only the factory tokenizers are used: the same for every model of an architecture."""
    return {"qwen3": qwen3_bitnet, "gemma3": gemma3_bitnet}


def _tokenizer(model_dir, tmp_path, name="out", **overrides) -> TextTokenizer:
    """A folder with the model's tokenizer.json and a manifest as the exporter would write it."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    qwen = json.loads((model_dir / "config.json").read_text())["model_type"] == "qwen3"
    fields = dict(arch="qwen3" if qwen else "gemma3", weights="i2s", pooling="lasttoken" if qwen else "mean",
                  normalize=True, dimension=128, hidden_size=128, max_length=16, padding_side="right",
                  pad_token_id=tok.token_to_id("<|endoftext|>" if qwen else "<pad>"),
                  append_eos_token_id=tok.token_to_id("<|endoftext|>") if qwen else None)
    fields.update(overrides)
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    Manifest(**fields).write(folder)
    return TextTokenizer.from_folder(folder)


def _hf(model_dir):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def test_qwen3_appends_eos_once_and_pads_right(models, tmp_path):
    t = _tokenizer(models["qwen3"], tmp_path)
    eos = t.eos_id
    texts = ["a cat", "The quick brown fox", "already ends<|endoftext|>", ""]
    ids, mask = t.encode(texts)
    assert ids.dtype == np.int64 and mask.dtype == np.int64 and ids.shape == mask.shape
    hf = _hf(models["qwen3"])
    for row, text in enumerate(texts):
        n = int(mask[row].sum())
        expected = [i for i in hf.encode(text).ids if i != eos] + [eos]
        assert ids[row, :n].tolist() == expected
        assert mask[row, :n].all() and not mask[row, n:].any()
        assert (ids[row, n:] == t.pad_id).all()
    assert ids[3, :1].tolist() == [eos]  # an empty text is its EOS alone
    assert ids.shape[1] == max(len(x) for x in t.tokenize(texts))  # padded to the longest only


def test_left_padding_puts_text_last(models, tmp_path):
    t = _tokenizer(models["qwen3"], tmp_path, padding_side="left")
    ids, mask = t.encode(["a", "The quick brown fox jumps"])
    assert mask[0, -1] == 1 and mask[0, 0] == 0
    assert ids[0, -1] == t.eos_id and ids[1, -1] == t.eos_id
    right = _tokenizer(models["qwen3"], tmp_path, name="right", padding_side="right")
    r_ids, r_mask = right.encode(["a", "The quick brown fox jumps"])
    assert ids[mask == 1].tolist() == r_ids[r_mask == 1].tolist()


def test_truncation_keeps_eos_and_warns_once(models, tmp_path, caplog):
    t = _tokenizer(models["qwen3"], tmp_path, max_length=8)
    long_text = "The quick brown fox jumps over the lazy dog. " * 5
    with caplog.at_level(logging.WARNING, logger="bitnet_onnx"):
        ids, mask = t.encode([long_text, long_text, "a"])
        t.encode([long_text])
    assert ids.shape == (3, 8)
    assert ids[0, -1] == t.eos_id and mask[0].all()
    assert ids[0, :7].tolist() == _hf(models["qwen3"]).encode(long_text).ids[:7]
    warnings = [r for r in caplog.records if "truncated" in r.getMessage()]
    assert len(warnings) == 1


def test_gemma3_keeps_tokenizer_specials_and_truncates_to_max_length(models, tmp_path):
    """Truncation keeps <bos> and <eos> and cuts the text between them (transformers' rule)."""
    t = _tokenizer(models["gemma3"], tmp_path, max_length=6)
    hf = _hf(models["gemma3"])
    long_text = "The quick brown fox jumps over the lazy dog"
    ids, mask = t.encode(["hello", "", long_text])
    assert ids[0, :mask[0].sum()].tolist() == hf.encode("hello").ids  # <bos> ... <eos> from the tokenizer
    assert ids[1, :mask[1].sum()].tolist() == hf.encode("").ids
    full = hf.encode(long_text).ids
    assert mask[2].sum() == 6 and ids[2].tolist() == full[:5] + full[-1:]
    assert full[-1] == hf.token_to_id("<eos>") and full[0] == hf.token_to_id("<bos>")
    assert (ids[1, mask[1] == 0] == t.pad_id).all()
    assert t.prepare_ids([full]) == [ids[2].tolist()]  # a caller's ids keep their specials the same way
    with pytest.raises(BitnetOnnxError, match="max_length 1 leaves no room for the 2 special tokens"):
        _tokenizer(models["gemma3"], tmp_path, name="one", max_length=1)


def test_bad_inputs(models, tmp_path):
    t = _tokenizer(models["qwen3"], tmp_path)
    with pytest.raises(BitnetOnnxError, match=r"texts\[1\]"):
        t.encode(["ok", 3])
    with pytest.raises(BitnetOnnxError, match="list of strings"):
        t.encode("one string")
    (tmp_path / "out" / "tokenizer.json").unlink()
    with pytest.raises(BitnetOnnxError, match="tokenizer.json"):
        TextTokenizer.from_folder(tmp_path / "out")
    (tmp_path / "out" / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(BitnetOnnxError, match="not a valid tokenizer.json"):
        TextTokenizer.from_folder(tmp_path / "out")
