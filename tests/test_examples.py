"""The C and C++ host examples (examples/) against onnxruntime from Python, on tiny exported models.

examples/CMakeLists.txt is built into build/examples with the ORT headers the op library was built
with and the libonnxruntime of the onnxruntime wheel; embed_c and embed_cpp then embed the token
ids TextTokenizer gives for a few texts, and their sentence_embedding must equal what an
InferenceSession in this process computes for the same model and ids (the ORT-native int8 export
runs with --no-op-library). Each bad input is a one-line error. A missing compiler, build tool or
header fails with what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from bitnet_onnx import customops
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.tokenization import TextTokenizer

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build" / "examples"
FETCHED_HEADERS = REPO / "build" / "examples-ort-headers" / "include"
PROGRAMS = ("embed_c", "embed_cpp")
HINT = "scripts/setup.sh --test installs the build tools (apt: g++; pip: cmake, ninja)"
TEXTS = [
    "What is the capital of France?",
    "Paris is the capital and largest city of France.",
    "Ternary weights",
    "The quick brown fox jumps over the lazy dog while the weather is sunny with a light breeze.",
]


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)


def _tool(name: str) -> str:
    """A build tool from the venv running pytest, else from PATH; missing is a failure."""
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if not found:
        pytest.fail(f"{name} not found: the host examples need it ({HINT})")
    return found


def _ort_headers() -> Path:
    """ONNXRUNTIME_INCLUDE_DIR, else the op library build's copy, else fetched once into build/."""
    env = os.environ.get("ONNXRUNTIME_INCLUDE_DIR")
    if env:
        if not (Path(env) / "onnxruntime_c_api.h").is_file():
            pytest.fail(f"ONNXRUNTIME_INCLUDE_DIR={env} has no onnxruntime_c_api.h")
        return Path(env)
    for path in sorted(REPO.glob("build/*/.ort-headers/include")):
        if (path / "onnxruntime_c_api.h").is_file():
            return path
    res = _run(["sh", REPO / "scripts" / "fetch_ort_headers.sh", FETCHED_HEADERS])
    if res.returncode != 0 or not (FETCHED_HEADERS / "onnxruntime_c_api.h").is_file():
        pytest.fail("no ONNX Runtime headers: not in build/*/.ort-headers (install the package first) and "
                    f"scripts/fetch_ort_headers.sh failed:\n{res.stderr[-2000:]}\n"
                    "set ONNXRUNTIME_INCLUDE_DIR to a folder with onnxruntime_c_api.h")
    return FETCHED_HEADERS


def _ort_library() -> Path:
    """The libonnxruntime.so.<version> inside the installed onnxruntime wheel."""
    capi = Path(ort.__file__).parent / "capi"
    libs = sorted(p for p in capi.glob("libonnxruntime.so*") if p.is_file())
    if not libs:
        pytest.fail(f"no libonnxruntime.so* in {capi}: this onnxruntime install ships no shared library")
    return libs[0]


@pytest.fixture(scope="module")
def programs() -> dict[str, Path]:
    """Configures and builds examples/ (incrementally); program name -> executable."""
    for compiler in (os.environ.get("CC") or "cc", os.environ.get("CXX") or "c++"):  # what CMake looks for
        if not shutil.which(compiler):
            pytest.fail(f"no C/C++ compiler ('{compiler}' not on PATH): {HINT}")
    ninja = _tool("ninja")
    configure = [_tool("cmake"), "-S", REPO / "examples", "-B", BUILD, "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DONNXRUNTIME_INCLUDE_DIR={_ort_headers()}", f"-DONNXRUNTIME_LIB={_ort_library()}",
                 "-DCMAKE_C_FLAGS=-Werror", "-DCMAKE_CXX_FLAGS=-Werror"]
    for cmd in (configure, [ninja, "-C", BUILD, "-j2", *PROGRAMS]):
        res = _run(cmd)
        assert res.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return {name: BUILD / name for name in PROGRAMS}


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
def test_hosts_equal_python(programs, exported, model, tmp_path):
    """i2s exports with the op library; the ORT-native int8 export with --no-op-library."""
    folder = exported[model]
    assert Manifest.read(folder).needs_custom_ops == (model != "qwen3-int8")
    tokenizer = TextTokenizer.from_folder(folder)
    rows = tokenizer.tokenize(TEXTS)
    assert len({len(r) for r in rows}) > 1, "texts of one length would not exercise padding"
    ids_file = _write_ids(tmp_path / "ids.txt", rows)
    expected = _python_embed(folder, *tokenizer.encode(TEXTS))
    assert expected.shape == (len(TEXTS), Manifest.read(folder).dimension)
    for name, program in programs.items():
        got = _host_embed(program, folder, ids_file)
        assert got.shape == expected.shape, name
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5, err_msg=name)


def test_hosts_read_ids_from_stdin_with_commas(programs, exported):
    """'-' reads stdin; commas separate ids as well as spaces; one text gives one line."""
    folder = exported["qwen3"]
    tokenizer = TextTokenizer.from_folder(folder)
    row = tokenizer.tokenize(TEXTS[:1])[0]
    expected = _python_embed(folder, *tokenizer.encode(TEXTS[:1]))
    for name, program in programs.items():
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
def test_hosts_fail_with_one_line(programs, exported, tmp_path, case, expect):
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
    for name, program in programs.items():
        res = _run([program, *args])
        assert res.returncode == 1, (name, res.returncode, res.stderr)
        assert res.stdout == "", name
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{name}: ") and expect in lines[0], (name, res.stderr)
