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
