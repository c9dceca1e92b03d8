"""The C and C++ host examples (examples/) against onnxruntime from Python, on tiny exported models.

The session's ``host_programs`` (conftest.py) builds examples/; embed_c and embed_cpp then embed
the token ids TextTokenizer gives for a few texts, and their sentence_embedding must equal what an
InferenceSession in this process computes for the same model and ids (the ORT-native int8 export
runs with --no-op-library). Each bad input is a one-line error.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from bitnet_onnx import customops
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.tokenization import TextTokenizer

TEXTS = [
    "What is the capital of France?",
    "Paris is the capital and largest city of France.",
    "Ternary weights",
    "The quick brown fox jumps over the lazy dog while the weather is sunny with a light breeze.",
]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def exported(qwen3_bitnet, tiny_model, tiny_export):
    """Tiny i2s exports: Qwen3 (last-token pooling, right padding), Gemma3 (mean, sliding window, left padding)."""
    return {
        "qwen3": tiny_export(qwen3_bitnet),
        "gemma3": tiny_export(tiny_model("gemma3", padding_side="left")),
        "qwen3-int8": tiny_export(qwen3_bitnet, "int8"),
    }


def _write_ids(path: Path, rows) -> Path:
    path.write_text("".join(" ".join(map(str, row)) + "\n" for row in rows), encoding="utf-8")
    return path


def _host_embed(program: Path, folder: Path, ids_file: Path) -> np.ndarray:
    manifest = Manifest.read(folder)
    library = [customops.library_path()] if manifest.needs_custom_ops else ["--no-op-library"]
    res = _run([program, "--threads", "1", "--pad-side", manifest.padding_side,
                "--pad-id", manifest.pad_token_id, *library, folder / manifest.model_file, ids_file])
    assert res.returncode == 0, f"{program.name} failed:\n{res.stderr[-4000:]}"
    assert res.stderr == "", res.stderr
    return np.array([[float(v) for v in line.split()] for line in res.stdout.splitlines()], np.float32)


def _python_embed(folder: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    if Manifest.read(folder).needs_custom_ops:
        options = customops.session_options(threads=1)
    else:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
    return sess.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})[0]


@pytest.mark.parametrize("model", ["qwen3", "gemma3", "qwen3-int8"])
def test_hosts_equal_python(host_programs, exported, model, tmp_path):
    """i2s exports with the op library; the ORT-native int8 export with --no-op-library."""
    folder = exported[model]
    assert Manifest.read(folder).needs_custom_ops == (model != "qwen3-int8")
    tokenizer = TextTokenizer.from_folder(folder)
    rows = tokenizer.tokenize(TEXTS)
    assert len({len(r) for r in rows}) > 1, "texts of one length would not exercise padding"
    ids_file = _write_ids(tmp_path / "ids.txt", rows)
    expected = _python_embed(folder, *tokenizer.encode(TEXTS))
    assert expected.shape == (len(TEXTS), Manifest.read(folder).dimension)
    for name, program in host_programs.items():
        got = _host_embed(program, folder, ids_file)
        assert got.shape == expected.shape, name
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=name)


def test_hosts_read_ids_from_stdin_with_commas(host_programs, exported):
    """'-' reads stdin; commas separate ids as well as spaces; one text gives one line."""
    folder = exported["qwen3"]
    tokenizer = TextTokenizer.from_folder(folder)
    row = tokenizer.tokenize(TEXTS[:1])[0]
    expected = _python_embed(folder, *tokenizer.encode(TEXTS[:1]))
    for name, program in host_programs.items():
        res = _run([program, "--threads", "1", customops.library_path(), folder / "model.onnx", "-"],
                   input=",".join(map(str, row)) + "\n")
        assert res.returncode == 0, res.stderr
        got = np.array([[float(v) for v in line.split()] for line in res.stdout.splitlines()], np.float32)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("case, expect", [
    ("missing_library", "RegisterCustomOpsLibrary"),
    ("missing_model", "no-such-model.onnx"),
    ("not_a_model", "Protobuf parsing failed"),
    ("bad_id", "line 2: 'x7' is not a non-negative token id"),
    ("empty_line", "line 2: no token ids"),
    ("id_out_of_vocab", "Gather"),
    ("no_arguments", "usage:"),
    ("bad_threads", "--threads needs an integer in [1, "),
    ("i2s_without_library", "I2STernaryMatMul"),
])
def test_hosts_fail_with_one_line(host_programs, exported, tmp_path, case, expect):
    """Each error is one line on stderr naming the problem, exit 1, nothing on stdout."""
    folder = exported["qwen3"]
    library, model = customops.library_path(), folder / "model.onnx"
    ids = _write_ids(tmp_path / "ids.txt", [[5, 6, 7], [8, 9]])
    args = {
        "missing_library": [tmp_path / "no-such-lib.so", model, ids],
        "missing_model": [library, tmp_path / "no-such-model.onnx", ids],
        "not_a_model": [library, ids, ids],
        "bad_id": [library, model, _write_ids(tmp_path / "bad.txt", [[5, 6], ["x7", 8]])],
        "empty_line": [library, model, _write_ids(tmp_path / "empty.txt", [[5, 6], []])],
        "id_out_of_vocab": [library, model, _write_ids(tmp_path / "big.txt", [[5, 10**6]])],
        "no_arguments": [],
        "bad_threads": ["--threads", "0", library, model, ids],
        "i2s_without_library": ["--no-op-library", model, ids],
    }[case]
    for name, program in host_programs.items():
        res = _run([program, *args])
        assert res.returncode == 1, (name, res.returncode, res.stderr)
        assert res.stdout == "", name
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{name}: ") and expect in lines[0], (name, res.stderr)
