"""``bitnet-onnx export --layout hf``: the exporter writes the HF layout itself (the same files as
``write_hf_layout`` after the fact), for both architectures; the default layout adds none of them."""

from __future__ import annotations

import filecmp
import json

import onnxruntime as ort
import pytest

from integrations_support import ARCHS, TEXTS, assert_same_vectors, export_with_layout

from bitnet_onnx import Embedder, customops
from bitnet_onnx.cli import main
from bitnet_onnx.export.hf_layout import HF_MODEL_FILE, LAST_HIDDEN_STATE

LAYOUT_FILES = ("config.json", "modules.json", "1_Pooling/config.json", "config_sentence_transformers.json",
                "sentence_bert_config.json", HF_MODEL_FILE)


@pytest.mark.parametrize("arch", ARCHS)
def test_export_layout_hf_writes_what_write_hf_layout_writes(tiny_model, tmp_path, arch):
    model = tiny_model(arch)
    out = tmp_path / "cli"
    assert main(["export", str(model), "-o", str(out), "--weights", "i2s", "--layout", "hf"]) == 0
    after = export_with_layout(tmp_path / "after", model, "i2s")
    for name in LAYOUT_FILES:
        assert (out / name).is_file(), name
    for name in ("modules.json", "1_Pooling/config.json", "sentence_bert_config.json", "tokenizer.json"):
        assert filecmp.cmp(out / name, after / name, shallow=False), name
    assert json.loads((out / "config_sentence_transformers.json").read_text()) == \
        json.loads((after / "config_sentence_transformers.json").read_text())
    session = ort.InferenceSession(str(out / HF_MODEL_FILE), customops.session_options())
    assert [o.name for o in session.get_outputs()] == [LAST_HIDDEN_STATE]
    assert_same_vectors(Embedder(out, threads=1).encode(TEXTS), Embedder(after, threads=1).encode(TEXTS))


def test_default_layout_adds_nothing(tiny_model, tmp_path):
    out = tmp_path / "plain"
    assert main(["export", str(tiny_model("qwen3")), "-o", str(out), "--weights", "int8"]) == 0
    assert not any((out / name).exists() for name in LAYOUT_FILES)
