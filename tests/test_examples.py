"""The C and C++ host examples (examples/) against onnxruntime from Python, on tiny exported models.

The session's ``host_programs`` (conftest.py) builds examples/; embed_c and embed_cpp then embed
the token ids TextTokenizer gives for a few texts, and their sentence_embedding must equal what an
InferenceSession in this process computes for the same model and ids (the ORT-native int8 export
runs with --no-op-library). Each bad input is a one-line error. Both programs refuse a model
importing another bitnet_onnx version than the library's (ORT would run it: docs/op.md, "Version")
with examples/model_opset.h, which is also built alone under ASan + UBSan and must agree with
protobuf's own parser on every prefix of an export and on hand-made hostile files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bitnet_onnx import customops
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.tokenization import TextTokenizer

TEXTS = [
    "What is the capital of France?",
    "Paris is the capital and largest city of France.",
    "Ternary weights",
    "The quick brown fox jumps over the lazy dog while the weather is sunny with a light breeze.",
]


def _run(cmd: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


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


@pytest.mark.parametrize("model", [*ARCHITECTURES, "qwen3-int8"])
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


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_hosts_print_the_bytes_of_an_output_precision_export(host_programs, tiny_model, tiny_export, arch, tmp_path):
    """export --output-precision: the hosts print the graph's int8 / uint8 values, equal to
    sentence-transformers' quantize_embeddings of the float32 export's output."""
    # a plain import: the reference moving fails the test instead of skipping it
    from sentence_transformers.util.quantization import quantize_embeddings

    from bitnet_onnx.precision import calibration_ranges, quantize

    model = tiny_model(arch)
    floats_folder = tiny_export(model)
    tokenizer = TextTokenizer.from_folder(floats_folder)
    ids_file = _write_ids(tmp_path / "ids.txt", tokenizer.tokenize(TEXTS))
    floats = _python_embed(floats_folder, *tokenizer.encode(TEXTS))
    ranges = calibration_ranges(floats)
    np.save(tmp_path / "ranges.npy", ranges)
    for precision in ("int8", "ubinary"):
        folder = tiny_export(model, output_precision=precision,
                             output_ranges=str(tmp_path / "ranges.npy") if precision == "int8" else None)
        want = quantize_embeddings(floats, precision=precision, ranges=ranges)
        assert np.array_equal(want, quantize(floats, precision, ranges))
        for name, program in host_programs.items():
            got = _host_embed(program, folder, ids_file)
            assert got.shape == want.shape and np.array_equal(got, want.astype(np.float32)), (name, precision)


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
    ("not_a_model", "ids.txt: not a valid ONNX model (truncated protobuf"),
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


def test_a_reconfigure_leaves_the_onnxruntime_link_in_place(host_programs):
    """Both test workers configure the shared examples build (one at a time) while the other may be running
    its programs: a re-configure that re-created onnxruntime-lib/'s link removed it for a moment, and a
    program started then failed to load libonnxruntime (seen once in a suite run). The link stays the
    same file, and the programs still start."""
    from venvs import locked

    build = host_programs["embed_c"].parent
    (link,) = (build / "onnxruntime-lib").iterdir()
    before = os.lstat(link)
    cmake = shutil.which("cmake", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    with locked(build.with_name("examples.lock")):
        res = _run([cmake, str(build)])
    assert res.returncode == 0, res.stderr[-3000:]
    after = os.lstat(link)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert "usage:" in _run([host_programs["embed_cpp"]]).stderr


# -- the bitnet_onnx version a model imports (examples/model_opset.h) ------------------------------------
REPO = Path(__file__).resolve().parents[1]
READER = REPO / "examples" / "model_opset.h"
VERSION_REFUSED = "imports domain 'bitnet_onnx' version {imported}; this op library implements version 1"
MALFORMED = "not a valid ONNX model ("


def _with_domain_version(model: Path, version: int, out: Path) -> Path:
    """A copy of ``model`` whose bitnet_onnx opset_import says ``version`` (nothing else changed)."""
    proto = onnx.load(str(model))
    (entry,) = [o for o in proto.opset_import if o.domain == customops.DOMAIN]
    entry.version = version
    onnx.save(proto, str(out))
    return out


def _one_line_error(program: Path, args: list, timeout: float = 300) -> str:
    res = _run([program, *args], timeout=timeout)
    assert res.returncode == 1 and res.stdout == "", (program.name, res.returncode, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{program.name}: "), (program.name, res.stderr)
    return lines[0]


def test_reader_constants_are_the_librarys():
    """The domain and versions model_opset.h checks are customops/ort/domain.h's (the library exports neither)."""
    header, domain_h = READER.read_text(), (REPO / "customops" / "ort" / "domain.h").read_text()

    def value(pattern: str, text: str) -> str:
        found = re.findall(pattern, text)
        assert len(found) == 1, pattern
        return found[0]

    domain = value(r'#define BITNET_ONNX_DOMAIN "(\w+)"', header)
    assert domain == value(r'kDomain = "(\w+)"', domain_h) == customops.DOMAIN
    for which in ("First", "Last"):
        assert (value(rf"#define BITNET_ONNX_DOMAIN_VERSION_{which.upper()} (\d+)", header)
                == value(rf"kDomainVersion{which} = (\d+);", domain_h))
    assert value(r"kDomainVersionLast = (\d+);", domain_h) == str(customops.DOMAIN_VERSION)


@pytest.mark.parametrize("version", [2, 0, customops.DOMAIN_VERSION])
def test_hosts_check_the_domain_version(host_programs, exported, tmp_path, version):
    """A copy of an export importing bitnet_onnx version 2 (or 0) is refused before the session with one
    line naming the file and both versions; the same edit keeping version 1 runs as the export does."""
    folder = exported["qwen3"]
    model = _with_domain_version(folder / "model.onnx", version, tmp_path / f"model_v{version}.onnx")
    ids = _write_ids(tmp_path / "ids.txt", [[5, 6, 7], [8, 9]])
    for name, program in host_programs.items():
        if version == customops.DOMAIN_VERSION:
            res = _run([program, "--threads", "1", customops.library_path(), model, ids])
            assert res.returncode == 0 and res.stderr == "" and len(res.stdout.splitlines()) == 2, (name, res.stderr)
            continue
        line = _one_line_error(program, [customops.library_path(), model, ids])
        assert f"{model}: " + VERSION_REFUSED.format(imported=version) in line, line
        assert ("a newer bitnet-onnx wrote it?" in line) == (version > customops.DOMAIN_VERSION), line


def test_hosts_refuse_truncated_models(host_programs, exported, tmp_path):
    """Cut inside the first field, the graph and the last opset_import: one line each, before ORT sees the file."""
    data = (exported["qwen3"] / "model.onnx").read_bytes()
    ids = _write_ids(tmp_path / "ids.txt", [[5, 6, 7]])
    for cut in (1, 3, len(data) // 2, len(data) - 1):
        model = tmp_path / f"cut{cut}.onnx"
        model.write_bytes(data[:cut])
        for program in host_programs.values():
            line = _one_line_error(program, [customops.library_path(), model, ids])
            assert f"{model}: {MALFORMED}truncated protobuf" in line and f"of {cut})" in line, line


def test_hosts_refuse_a_fifo_model_without_blocking(host_programs, tmp_path):
    """A FIFO with no writer as MODEL: refused at once (opened non-blocking, then not a regular file)."""
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    ids = _write_ids(tmp_path / "ids.txt", [[5, 6, 7]])
    for program in host_programs.values():
        line = _one_line_error(program, [customops.library_path(), fifo, ids], timeout=60)
        assert f"{fifo}: the model is not a regular file (a FIFO)" in line, line
    line = _one_line_error(host_programs["embed_c"], [customops.library_path(), tmp_path, ids])
    assert f"{tmp_path}: the model is not a regular file (a directory)" in line, line


SANITIZE = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# Checks each file named on the command line: one line each, "ok" or the reader's message.
_READER_DRIVER = r"""
#define _POSIX_C_SOURCE 200809L
#include "model_opset.h"
int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    char error[1024];
    int status = model_check_domain_version(argv[i], BITNET_ONNX_DOMAIN, BITNET_ONNX_DOMAIN_VERSION_FIRST,
                                            BITNET_ONNX_DOMAIN_VERSION_LAST, error, sizeof error);
    printf("%s\n", status == 0 ? "ok" : error);
  }
  return 0;
}
"""


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 as protobuf writes it: ten bytes
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _opset(domain: bytes, version: int) -> bytes:
    return _field(8, _field(1, domain) + _varint(2 << 3) + _varint(version))


def _expected(data: bytes) -> str:
    """What the reader must say, from protobuf's own parse of the same bytes."""
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception:
        return MALFORMED
    bad = [o.version for o in proto.opset_import
           if o.domain == customops.DOMAIN and o.version != customops.DOMAIN_VERSION]
    return VERSION_REFUSED.format(imported=bad[0]) if bad else "ok"


def test_reader_sanitized_agrees_with_protobuf(exported, tmp_path):
    """model_opset.h alone, under ASan + UBSan (aborting on the first report), on every prefix of the head and
    the tail of an export, the version-2 copy, and hand-made files: its verdict (ok / refused version /
    malformed) is protobuf's for the same bytes, and it never reads out of bounds."""
    compiler = os.environ.get("CC") or "cc"
    if not shutil.which(compiler):
        pytest.fail(f"no C compiler ('{compiler}' not on PATH): apt install gcc")
    (tmp_path / "driver.c").write_text(_READER_DRIVER)
    exe = tmp_path / "reader"
    build = _run([compiler, "-std=c11", "-Wall", "-Wextra", "-Werror", "-g", *SANITIZE.split(),
                  f"-I{READER.parent}", tmp_path / "driver.c", "-o", exe])
    assert build.returncode == 0, build.stderr[-4000:]

    data = (exported["qwen3"] / "model.onnx").read_bytes()
    v2 = _with_domain_version(exported["qwen3"] / "model.onnx", 2, tmp_path / "v2.onnx").read_bytes()
    cases = {f"head{n}": data[:n] for n in range(0, 300)}
    cases |= {f"tail{n}": data[:n] for n in range(len(data) - 120, len(data) + 1)}
    cases |= {"v2": v2, "v2-last-byte-cut": v2[:-1]}
    ours = _opset(b"bitnet_onnx", 1)
    cases |= {
        "opset-before-a-graph-past-the-end": ours + _varint(7 << 3 | 2) + _varint(1 << 40),
        "version-2-first": _opset(b"bitnet_onnx", 2) + ours,
        "version-2-last": ours + _opset(b"bitnet_onnx", 2),
        "version-negative": _opset(b"bitnet_onnx", -1),
        "version-huge": _opset(b"bitnet_onnx", 2**63 - 1),
        "other-domain-version-2": _opset(b"bitnet_onnxx", 2) + _opset(b"bitnet_onn", 2) + _opset(b"", 2),
        "domain-repeated-last-wins": _field(8, _field(1, b"other") + _field(1, b"bitnet_onnx") + b"\x10\x02"),
        "version-repeated-last-wins": _field(8, _field(1, b"bitnet_onnx") + b"\x10\x01\x10\x02"),
        "version-not-a-varint": _field(8, _field(1, b"bitnet_onnx") + b"\x11" + bytes(8)),  # unknown field
        "opset-not-length-delimited": b"\x40\x02",  # field 8 as a varint: an unknown field
        "version-past-its-message": b"\x42\x0e\x0a\x0bbitnet_onnx\x10" + b"\x02",
        "domain-past-its-message": b"\x42\x05\x0a\x0bbitnet_onnx\x10\x02",
        "opset-length-huge": b"\x42" + _varint(2**64 - 1),
        "varint-10-bytes-high-bits-dropped": b"\x08" + b"\xff" * 9 + b"\x7f",
        "varint-11-bytes": b"\x08" + b"\xff" * 10 + b"\x01",
        "field-number-0": b"\x02\x00",
        "fixed32-cut": b"\x0d\x01\x02",
        "fixed64": b"\x09" + bytes(8) + ours,
        "not-protobuf": b"5 6 7\n8 9\n",
        "empty": b"",
    }
    paths = []
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        paths.append(tmp_path / name)
    res = _run([exe, *paths])
    assert res.returncode == 0 and res.stderr == "", res.stderr[-4000:]
    verdicts = res.stdout.splitlines()
    assert len(verdicts) == len(cases)
    for (name, content), path, verdict in zip(cases.items(), paths, verdicts):
        expected = _expected(content)
        assert (verdict == "ok") if expected == "ok" else verdict.startswith(f"{path}: {expected}"), (name, verdict)
    refused = [name for name, content in cases.items() if _expected(content) not in ("ok", MALFORMED)]
    assert {"v2", "version-2-first", "version-2-last", "version-negative", "domain-repeated-last-wins",
            "version-repeated-last-wins"} <= set(refused), refused

    # Groups (wire types 3 and 4): protobuf skips a well-formed one, ONNX never writes one; the reader refuses it.
    (tmp_path / "group").write_bytes(b"\x0b\x0c" + ours)
    assert _expected(b"\x0b\x0c" + ours) == "ok"
    res = _run([exe, tmp_path / "group"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"{tmp_path / 'group'}: {MALFORMED}protobuf wire type"), res.stdout
