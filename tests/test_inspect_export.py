"""`bitnet-onnx inspect EXPORT_DIR`: the manifest's facts and what a session on this host gets (op library,
kernel ISA and family, EncoderAttention's precision), each as the library's own entry points say, under the
same environment variables; an export without our ops never loads the library. GGUF files: tests/test_gguf.py."""

from __future__ import annotations

import pytest

from bitnet_onnx import cli, customops
from bitnet_onnx.manifest import MANIFEST_NAME, Manifest

HOST_VARIABLES = (customops.ISA_ENV, customops.KERNEL_ENV, customops.ATTENTION_PRECISION_ENV)


@pytest.fixture
def unforced(monkeypatch):
    """None of the library's variables set (conftest forces auto to f32 for the session): the host's own choices."""
    for name in HOST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture(scope="module")
def i2s_export(qwen3_bitnet, tiny_export):
    folder = tiny_export(qwen3_bitnet, "i2s")
    manifest = Manifest.read(folder)
    assert (manifest.attention, manifest.attention_precision) == ("fused", "auto")  # the defaults under test
    return folder


def _inspect(capsys, folder) -> dict[str, str]:
    """The printed block as {key: value}, after checking it succeeded, with nothing on stderr."""
    assert cli.main(["inspect", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0].startswith(f"{folder}: exported by bitnet-onnx ") and "this host:" in lines
    pairs = [line.strip().split(": ", 1) for line in lines[1:] if line != "this host:"]
    # one column: every value starts where the others do
    assert len({len(line) - len(line.split(": ", 1)[1].lstrip()) for line in lines[1:] if ": " in line}) == 1, out
    return {key: value.strip() for key, value in pairs}


def _fails(capsys, folder) -> str:
    assert cli.main(["inspect", str(folder)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith("bitnet-onnx inspect: error: "), err
    return err.strip()


def test_manifest_facts(i2s_export, capsys, unforced):
    manifest = Manifest.read(i2s_export)
    shown = _inspect(capsys, i2s_export)
    assert shown["arch"] == manifest.arch == "qwen3" and shown["weights"] == "i2s"
    assert shown["attention"] == "fused, precision auto"
    assert shown["max_length"] == f"{manifest.max_length} tokens"
    assert shown["embedding"].startswith(f"{manifest.dimension} dims, {manifest.pooling} pooling")
    assert shown["custom ops"] == ", ".join(manifest.custom_ops) and "I2STernaryMatMul" in shown["custom ops"]
    assert shown["needs onnxruntime"] == f">= {manifest.min_onnxruntime}"


def test_host_facts_are_the_librarys_own(i2s_export, capsys, unforced):
    shown = _inspect(capsys, i2s_export)
    assert shown["op library"] == customops.library_path()
    assert shown["kernel ISA"] == f"{customops.selected_isa()} (the best this build and CPU run)"
    assert shown["kernel family"] == "measure (timed on this host's first calls of each shape)"
    assert shown["attention precision"] == f"auto -> {customops.attention_auto_precision()} (the op library's choice here)"


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_forced_attention_precision(precision, i2s_export, capsys, unforced):
    unforced.setenv(customops.ATTENTION_PRECISION_ENV, precision)
    assert _inspect(capsys, i2s_export)["attention precision"] == \
        f"auto -> {precision} (forced by {customops.ATTENTION_PRECISION_ENV}={precision})"


def test_forced_isa_and_family(i2s_export, capsys, unforced):
    """BITNET_ONNX_ISA picks the kernels and takes part in auto's answer, as in a session (scalar: f32)."""
    unforced.setenv(customops.ISA_ENV, "scalar")
    unforced.setenv(customops.KERNEL_ENV, "mul")
    shown = _inspect(capsys, i2s_export)
    assert shown["kernel ISA"] == f"scalar (forced by {customops.ISA_ENV}=scalar)"
    assert shown["kernel family"] == f"mul (forced by {customops.KERNEL_ENV}=mul)"
    assert shown["attention precision"] == "auto -> f32 (the op library's choice here)"


@pytest.mark.parametrize("variable, value", [(customops.ATTENTION_PRECISION_ENV, "fp8"),
                                             (customops.ISA_ENV, "nosuchisa")])
def test_a_value_the_session_would_refuse_is_one_line(variable, value, i2s_export, capsys, unforced):
    unforced.setenv(variable, value)
    assert f"{variable}={value}" in _fails(capsys, i2s_export)


def test_explicit_precision_is_as_exported(qwen3_bitnet, tiny_export, capsys, unforced):
    """An explicit bf16 node ignores the variable that forces auto (docs/attention.md)."""
    unforced.setenv(customops.ATTENTION_PRECISION_ENV, "f32")
    shown = _inspect(capsys, tiny_export(qwen3_bitnet, "i2s", attention_precision="bf16"))
    assert shown["attention"] == "fused, precision bf16" and shown["attention precision"] == "bf16 (as exported)"


@pytest.mark.parametrize("weights, attention", [("int8", "ort"), ("f32", "onnx")])
def test_export_without_our_ops_needs_no_library(weights, attention, qwen3_bitnet, tiny_export, capsys, unforced):
    """No library lines, and no library loaded: a missing one and a bad ISA name do not matter."""
    folder = tiny_export(qwen3_bitnet, weights, attention_name=attention)
    unforced.setenv(customops.LIBRARY_ENV, "/nonexistent/libbitnet_onnx_ops.so")
    unforced.setenv(customops.ISA_ENV, "nosuchisa")
    shown = _inspect(capsys, folder)
    assert shown["weights"] == weights and shown["attention"] == f"{attention}, precision f32"
    assert shown["custom ops"] == "none (stock onnxruntime ops only)"
    assert shown["op library"] == "not needed (no bitnet_onnx custom ops)"
    assert not {"kernel ISA", "kernel family", "attention precision"} & set(shown)


def test_bad_paths_are_one_line(tmp_path, capsys):
    empty = tmp_path / "not-an-export"
    empty.mkdir()
    assert f"{empty / MANIFEST_NAME}: manifest missing" in _fails(capsys, empty)
    assert f"{tmp_path / 'missing'}: file not found" in _fails(capsys, tmp_path / "missing")
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    assert f"{text}: not a readable GGUF file" in _fails(capsys, text)
