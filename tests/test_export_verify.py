"""``bitnet-onnx verify``: passes on a faithful export, fails (exit 1) on a wrong one."""

from __future__ import annotations

import pytest

from bitnet_onnx.cli import main


@pytest.fixture(scope="module")
def folders(tiny_model, tiny_export):
    model, other = tiny_model("gemma3", dense=True), tiny_model("gemma3", dense=True, seed=1)
    return model, other, tiny_export(model), tiny_export(model, "f16")


def test_verify_passes(capsys, folders):
    model, _, i2s, f16 = folders
    assert main(["verify", str(i2s), str(model), "--threshold", "0.9999"]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and out.count("\n") == 5 + 2  # header, five default texts, verdict
    # f16 of a BitNet model is compared with the fake-quant (float activation) reference
    assert main(["verify", str(f16), str(model), "--texts", "one text", "and another one", "--threshold", "0.99999"]) == 0


def test_verify_fails_on_a_different_model(capsys, folders):
    _, other, i2s, _ = folders
    assert main(["verify", str(i2s), str(other), "--texts", "hello world"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "below threshold" in out


def test_verify_bad_arguments(capsys, folders, tmp_path):
    model, _, i2s, _ = folders
    assert main(["verify", str(tmp_path), str(model)]) == 1
    assert "manifest missing" in capsys.readouterr().err
    assert main(["verify", str(i2s), str(model), "--threshold", "2"]) == 1
    assert "--threshold" in capsys.readouterr().err
