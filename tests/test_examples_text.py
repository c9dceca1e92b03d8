"""The C and C++ examples in strings-in mode (--text): UTF-8 texts into model_text.onnx of a
--text-input export, with our op library and (Qwen3's byte-level BPE) onnxruntime-extensions' registered.

The programs are built from examples/ against the onnxruntime wheel's libonnxruntime (conftest's
host_programs), and their sentence embeddings must equal onnxruntime-in-Python's for the same
texts (1e-5). The extensions library this environment has is the one the PyPI wheel ships, a Python
extension module: a non-Python process loads it only with libpython present, so the programs run
with libpython preloaded (LD_PRELOAD) when the model needs it (Gemma3's needs only our library). A C/C++ service would register the native library of
onnxruntime-extensions' release packages (docs/hosts.md) and needs no Python.
Bad input (bytes that are not UTF-8, an empty batch, one empty text) gives a one-line error or a
defined result; decomposed (NFD) text is normalized in the graph like the tokenizer does.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from bitnet_onnx import customops
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.manifest import Manifest

TEXTS = ["What is the capital of France?", "", "Paris est la capitale de la France — café, naïve.",
         "東京は日本の首都です。🙂 👨\u200d👩\u200d👧", "tabs\tand  runs   of spaces\r"]


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, timeout=300, **kw)


def _libpython() -> Path:
    """The shared libpython the extensions' library was built against (it calls into Python's C API)."""
    libdir, name = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    path = Path(libdir or "") / (name or "")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not path.is_file():
        pytest.fail(f"this Python has no shared libpython ({path}): the PyPI onnxruntime-extensions library cannot "
                    "be loaded outside Python without it; use a Python built with --enable-shared")
    return path


@pytest.fixture(scope="module")
def programs(host_programs) -> dict[str, Path]:
    """embed_c and embed_cpp, built once per session by conftest (host_programs, in the tests' build cache)."""
    return host_programs


@pytest.fixture(scope="module")
def exported(tiny_model, tiny_export):
    return {
        "qwen3": tiny_export(tiny_model("qwen3"), text_input=True),
        "gemma3": tiny_export(tiny_model("gemma3", padding_side="left"), text_input=True),
        "qwen3-int8": tiny_export(tiny_model("qwen3"), weights="int8", text_input=True),
    }


def _host(program: Path, folder: Path, texts_file: Path, *extra) -> subprocess.CompletedProcess:
    """The program on the folder's strings-in model, with the libraries its manifest asks for."""
    manifest = Manifest.read(folder)
    ours = manifest.needs_custom_ops or manifest.text_custom_ops
    library = [customops.library_path()] if ours else ["--no-op-library"]
    env = dict(os.environ)
    if manifest.text_needs_extensions:
        extra = ("--extensions", customops.extensions_library_path(), *extra)
        env["LD_PRELOAD"] = str(_libpython())
    return _run([program, "--threads", "1", "--text", *extra, *library, folder / manifest.text_model_file, texts_file],
                env=env)


def _floats(stdout: bytes) -> np.ndarray:
    return np.array([[float(v) for v in line.split()] for line in stdout.decode().splitlines()], np.float32)


def _python(folder: Path, texts: list[str], prompt: str | None = None) -> np.ndarray:
    manifest = Manifest.read(folder)
    options = customops.session_options(threads=1, extensions=manifest.text_needs_extensions,
                                        op_library=manifest.needs_custom_ops or bool(manifest.text_custom_ops))
    session = ort.InferenceSession(str(folder / manifest.text_model_file), options, providers=["CPUExecutionProvider"])
    feed = {"text": np.array(texts, dtype=object).reshape(-1)}
    if prompt is not None:
        feed["prompt"] = np.array([prompt], dtype=object)
    return session.run(["sentence_embedding"], feed)[0]


def _write(path: Path, texts: list[str]) -> Path:
    path.write_bytes("".join(t + "\n" for t in texts).encode("utf-8"))
    return path


@pytest.mark.parametrize("model", [*ARCHITECTURES, "qwen3-int8"])
def test_hosts_embed_texts_like_python(programs, exported, model, tmp_path):
    folder = exported[model]
    texts_file = _write(tmp_path / "texts.txt", TEXTS)
    for prompt in (None, "query: "):
        expected = _python(folder, TEXTS, prompt)
        for name, program in programs.items():
            res = _host(program, folder, texts_file, *(["--prompt", prompt] if prompt else []))
            assert res.returncode == 0 and res.stderr == b"", (name, res.stderr.decode()[-2000:])
            np.testing.assert_allclose(_floats(res.stdout), expected, rtol=0, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("case, content, expect", [
    ("not_utf8", b"ok\n\xff\xfe bad\n", "utf8_guard: a text is not valid UTF-8"),
    ("truncated_utf8", b"caf\xc3\n", "utf8_guard"),
    ("surrogate", b"\xed\xa0\x80\n", "utf8_guard"),
])
def test_hosts_reject_bad_texts(programs, exported, tmp_path, case, content, expect):
    texts_file = tmp_path / "bad.txt"
    texts_file.write_bytes(content)
    for name, program in programs.items():
        res = _host(program, exported["qwen3"], texts_file)
        lines = res.stderr.decode().strip().splitlines()
        assert res.returncode == 1 and res.stdout == b"", (name, res.returncode, res.stderr)
        assert len(lines) == 1 and lines[0].startswith(f"{name}: ") and expect in lines[0], (name, lines)


def test_hosts_empty_batch_and_empty_text(programs, exported, tmp_path):
    """No lines: an empty batch, nothing printed, exit 0; one empty line: one text, as in Python."""
    folder = exported["gemma3"]
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    one = _write(tmp_path / "one.txt", [""])
    for name, program in programs.items():
        res = _host(program, folder, empty)
        assert res.returncode == 0 and res.stdout == b"" and res.stderr == b"", (name, res.stderr)
        res = _host(program, folder, one)
        assert res.returncode == 0, (name, res.stderr)
        np.testing.assert_allclose(_floats(res.stdout), _python(folder, [""]), rtol=0, atol=1e-5, err_msg=name)


def test_hosts_with_a_missing_extensions_library(programs, exported, tmp_path):
    texts_file = _write(tmp_path / "t.txt", ["x"])
    folder = exported["qwen3-int8"]
    for name, program in programs.items():
        res = _run([program, "--text", "--extensions", tmp_path / "missing.so", customops.library_path(),
                    folder / "model_text.onnx", texts_file])
        lines = res.stderr.decode().strip().splitlines()
        assert res.returncode == 1 and len(lines) == 1 and "missing.so" in lines[0], (name, res.stderr)


def test_hosts_normalize_to_nfc(programs, exported, tmp_path):
    """Qwen3's tokenizer.json normalizes to NFC: decomposed accents embed like the composed text."""
    folder = exported["qwen3"]
    nfd = _write(tmp_path / "nfd.txt", ["cafe\u0301 nai\u0308ve", "\u1100\u1161\u11a8"])  # é ï, Hangul 각 as jamo
    expected = _python(folder, ["café naïve", "각"])
    for name, program in programs.items():
        res = _host(program, folder, nfd)
        assert res.returncode == 0, (name, res.stderr)
        np.testing.assert_allclose(_floats(res.stdout), expected, rtol=0, atol=1e-5, err_msg=name)
