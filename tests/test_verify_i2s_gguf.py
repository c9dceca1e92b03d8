"""``verify`` against an I2_S GGUF: the PyTorch reference takes its weights from our own GGUF reader
(gguf-py, which transformers' GGUF loader uses, cannot dequantize I2_S), the projections as BitLinear
from the I2_S codes as stored. Each architecture, at its real width and vocabulary with one layer (conftest's
real_width_model, shared)."""

from __future__ import annotations

import pytest

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.cli import main
from bitnet_onnx.convert_gguf.writer import convert
from bitnet_onnx.export.exporter import export

pytestmark = pytest.mark.real_size  # the suite's tiers: tests/suite_marks.py


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_verify_an_i2s_gguf_export_against_the_gguf(tmp_path, capsys, real_width_model, arch):
    model = real_width_model(arch, layers=1)
    gguf = convert(model, tmp_path / "m.gguf", "i2_s", pre_tokenizer="qwen2" if arch == "qwen3" else None, progress=False)
    out = export(gguf, tmp_path / "out")
    capsys.readouterr()
    assert main(["verify", str(out), str(gguf), "--threshold", "0.999"]) == 0
    captured = capsys.readouterr()
    assert "PASS" in captured.out and "Traceback" not in captured.err
