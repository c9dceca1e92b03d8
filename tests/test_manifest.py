"""bitnet_onnx.json round trip and its errors."""

import json

import pytest

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import MANIFEST_NAME, Manifest


def _manifest():
    return Manifest(arch="qwen3", weights="i2s", pooling="lasttoken", normalize=True, dimension=128,
                    hidden_size=128, max_length=512, padding_side="left", pad_token_id=0,
                    append_eos_token_id=5, prompts={"query": "q: "})


def test_round_trip(tmp_path):
    _manifest().write(tmp_path)
    assert Manifest.read(tmp_path) == _manifest()


def test_errors_name_the_file(tmp_path):
    with pytest.raises(BitnetOnnxError, match="manifest missing"):
        Manifest.read(tmp_path)
    with pytest.raises(BitnetOnnxError, match="not a folder"):
        Manifest.read(tmp_path / "nope")
    path = tmp_path / MANIFEST_NAME
    path.write_text("{", encoding="utf-8")
    with pytest.raises(BitnetOnnxError, match="not valid JSON"):
        Manifest.read(tmp_path)
    data = json.loads(json.dumps(_manifest().__dict__))
    del data["pooling"]
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BitnetOnnxError, match="missing field.*pooling"):
        Manifest.read(tmp_path)
    data["pooling"] = "max"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BitnetOnnxError, match="unknown pooling 'max'"):
        Manifest.read(tmp_path)


@pytest.mark.parametrize("field, value, message", [
    ("format_version", None, "field 'format_version' must be int, got None"),  # found by the manifest fuzzer
    ("pad_token_id", None, "field 'pad_token_id' must be int"),
    ("normalize", "yes", "field 'normalize' must be bool"),
    ("prompts", {"query": 3}, r"field 'prompts' must be dict\[str, str\]"),
    ("custom_ops", "I2STernaryMatMul", r"field 'custom_ops' must be list\[str\]"),
    ("dimension", True, "field 'dimension' must be int, got True"),
    ("append_eos_token_id", 1.5, r"field 'append_eos_token_id' must be int \| None"),
])
def test_fields_of_the_wrong_type_are_one_line_errors(tmp_path, field, value, message):
    data = json.loads(json.dumps(_manifest().__dict__))
    data[field] = value
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BitnetOnnxError, match=message):
        Manifest.read(tmp_path)


def test_attention_precision_is_one_of_the_ops_values_and_absent_means_f32(tmp_path):
    """attention_precision (export --attention-precision) is one of the fused op's precisions; a manifest
    written before the field reads as f32, the default then (an explicit bf16 export of that time is not told apart)."""
    data = json.loads(json.dumps(_manifest().__dict__))
    del data["attention_precision"]
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data), encoding="utf-8")
    assert Manifest.read(tmp_path).attention_precision == "f32"
    data["attention_precision"] = "fp8"
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BitnetOnnxError, match=r"attention_precision must be one of f32, bf16, auto, got 'fp8'$"):
        Manifest.read(tmp_path)
