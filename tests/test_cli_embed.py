"""`bitnet-onnx embed`: every input and output format, errors as one line, and --help of every verb."""

import io
import json
import subprocess
import sys

import numpy as np
import pytest

from bitnet_onnx import Embedder
from bitnet_onnx.cli import VERBS, main

TEXTS = ["a cat sat on the mat", "", "What is the capital of France?"]


@pytest.fixture(scope="module")
def out_dir(qwen3_bitnet, tiny_export):
    return tiny_export(qwen3_bitnet, "i2s")


@pytest.fixture(scope="module")
def expected(out_dir):
    return Embedder(out_dir).encode(TEXTS)


def _run(capsys, *argv):
    code = main(["embed", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_texts_to_json_on_stdout(out_dir, expected, capsys):
    code, out, err = _run(capsys, out_dir, *TEXTS)
    assert code == 0, err
    np.testing.assert_allclose(np.array(json.loads(out), dtype=np.float32), expected, rtol=0, atol=1e-6)


def test_text_lines_to_npy(out_dir, expected, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")  # the blank middle line is a text
    dst = tmp_path / "out.npy"
    code, out, err = _run(capsys, out_dir, "--input", src, "--output", dst, "--batch-size", 2,
                          "--max-batch-tokens", 8)
    assert code == 0, err
    got = np.load(dst)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert out == "" and "3 x" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.npy"]  # no temp file left


def test_jsonl_to_jsonl_keeps_fields(out_dir, expected, tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)) + "\n",
                   encoding="utf-8")
    dst = tmp_path / "out.jsonl"
    code, _, err = _run(capsys, out_dir, "-i", src, "-o", dst)
    assert code == 0, err
    rows = [json.loads(line) for line in dst.read_text(encoding="utf-8").splitlines()]
    assert [(r["id"], r["text"]) for r in rows] == list(enumerate(TEXTS))
    np.testing.assert_allclose(np.array([r["embedding"] for r in rows], dtype=np.float32), expected,
                               rtol=0, atol=1e-6)


def test_stdin_to_json_file_with_dimensions_and_prompt(out_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\n".join(TEXTS).encode("utf-8"))))
    dst = tmp_path / "out.json"
    code, _, err = _run(capsys, out_dir, "--input", "-", "--output", dst, "--dimensions", 16,
                        "--prompt-name", "query", "--threads", 1)
    assert code == 0, err
    got = np.array(json.loads(dst.read_text()), dtype=np.float32)
    want = Embedder(out_dir).encode(TEXTS, dimensions=16, prompt_name="query")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_piped_process_is_quiet_and_bad_utf8_is_one_line(out_dir, tmp_path):
    """The real console script: stdout piped, short input -> JSON only, nothing on stderr."""
    exe = [sys.executable, "-m", "bitnet_onnx"]
    done = subprocess.run([*exe, "embed", str(out_dir), "hello"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""
    assert len(json.loads(done.stdout)) == 1
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9\n".encode("latin-1"))
    done = subprocess.run([*exe, "embed", str(out_dir), "-i", str(bad)], capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"bitnet-onnx embed: error: {bad}: not UTF-8 text (invalid byte 0xe9 at offset 3)"]


def test_reader_closing_the_pipe_early_is_not_an_error(out_dir):
    """`bitnet-onnx embed ... | head -c 100`: ~300 KB of JSON, the reader stops after 100 bytes."""
    cmd = [sys.executable, "-m", "bitnet_onnx", "embed", str(out_dir), *(["some text"] * 120)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(100).startswith(b"[[")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 0 and "Traceback" not in err and "Broken pipe" not in err


@pytest.mark.parametrize("argv, message", [
    (["{out}", "x", "--input", "{src}"], "not both"),
    (["{out}"], "no texts"),
    (["{out}", "x", "--output", "{tmp}/out.csv"], "unknown suffix"),
    (["{out}", "-i", "{tmp}/missing.txt"], "missing.txt: file not found"),
    (["{out}", "-i", "{tmp}/bad.jsonl"], "bad.jsonl:2: expected a JSON object"),
    (["{out}", "x", "--prompt-name", "nope"], "prompt_name 'nope'"),
    (["{tmp}/nowhere", "x"], "not a folder"),
])
def test_errors_are_one_line_and_write_nothing(out_dir, tmp_path, capsys, argv, message):
    src = tmp_path / "in.txt"
    src.write_text("x\n", encoding="utf-8")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n["no"]\n', encoding="utf-8")
    argv = [a.format(out=out_dir, src=src, tmp=tmp_path) for a in argv]
    code, out, err = _run(capsys, *argv)
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and err.startswith("bitnet-onnx embed: error:")


def test_failed_run_leaves_no_output_file(out_dir, tmp_path, capsys):
    dst = tmp_path / "out.npy"
    code, _, err = _run(capsys, out_dir, "x", "--output", dst, "--dimensions", 100000)
    assert code == 1 and "dimensions" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("verb", list(VERBS))
def test_help_of_every_verb_has_an_example(verb, capsys):
    with pytest.raises(SystemExit) as done:
        main([verb, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert f"bitnet-onnx {verb}" in text and "example" in text.lower()
