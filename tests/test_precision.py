"""Output precisions (bitnet_onnx.precision) against the real sentence-transformers package's
``quantize_embeddings``, byte for byte, on both architectures: the core functions, ``Embedder.encode``
(Matryoshka first; batch == one by one), the ``embed`` and ``calibrate`` verbs, ``export
--output-precision`` (the graph's own bytes on plain ONNX Runtime; a Dense width that is not a multiple
of 8 through its Pad), bad inputs, and one run at the real Qwen3-0.6B widths."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
# the reference: a plain import (sentence-transformers is in the test extra), so a module that moves or
# goes fails these tests instead of skipping them
from sentence_transformers.util.quantization import quantize_embeddings

from bitnet_onnx import Embedder
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.cli import main
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.precision import (CALIBRATION_FILE, NAMES, PRECISIONS, calibration_ranges, check_ranges, quantize,
                                   read_ranges)
from bitnet_onnx.runtime import finishing

TEXTS = [
    "a cat sat on the mat",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "What is the capital of France? Paris is the capital and largest city of France.",
    "Ternary weights",
    "Emoji and symbols: 🙂 🚀 ✓ → €",
    "How many legs does a spider have?",
    "x",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
]
CALIBRATION = [f"calibration text {i}: " + "lorem ipsum dolor sit amet " * (i % 5) for i in range(40)]
# full width (128) and a Matryoshka width that is not a multiple of 8: 20 values, 2 bytes of bits and a
# half byte padded per row (24 would pack into whole bytes, where bits packed across the batch, as
# sentence-transformers 5.6.1 and older did, give the same bytes)
WIDTHS = (None, 20)


def _st(embeddings: np.ndarray, precision: str, ranges) -> np.ndarray:
    """sentence-transformers' own bytes (ranges only where they apply, as its encode passes them)."""
    return quantize_embeddings(embeddings, precision=precision, ranges=ranges if PRECISIONS[precision].needs_ranges else None)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    assert a.tobytes() == b.tobytes()


def test_core_functions_equal_quantize_embeddings_outside_the_ranges_too():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 37)).astype(np.float32)
    ranges = calibration_ranges(x[:16])  # most rows fall outside these: clipped as sentence-transformers clips
    ranges[:, 3] = 0.25  # a constant dimension: step 1
    for name in NAMES:
        _same_bytes(quantize(x, name, ranges if PRECISIONS[name].needs_ranges else None), _st(x, name, ranges))
        assert quantize(x, name, ranges).shape[1] == PRECISIONS[name].values(37)
    assert PRECISIONS["ubinary"].bytes_per_vector(1024) == 128 and PRECISIONS["float32"].bytes_per_vector(1024) == 4096


@pytest.fixture(scope="module")
def calibrated(tiny_model, tiny_export, tmp_path_factory):
    """calibrated(arch) -> (the shared export, its calibration file (outside it), ranges by width)."""
    done = {}

    def get(arch):
        if arch not in done:
            folder = tiny_export(tiny_model(arch))
            path = tmp_path_factory.mktemp(f"ranges-{arch}") / "ranges.json"
            embedder = Embedder(folder, threads=1)
            widths = [w or embedder.dimension for w in WIDTHS]
            table = embedder.calibrate(CALIBRATION, dimensions=widths, path=path)
            done[arch] = folder, path, table
        return done[arch]

    return get


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_embedder_equals_quantize_embeddings_with_matryoshka_and_one_by_one(calibrated, arch):
    assert WIDTHS[1] % 8, "the Matryoshka width must leave its last byte of bits part padding"
    folder, path, table = calibrated(arch)
    embedder = Embedder(folder, threads=1)
    for width in WIDTHS:
        w = width or embedder.dimension
        # the calibration file holds sentence-transformers' ranges of the calibration texts at that width
        np.testing.assert_array_equal(table[w], calibration_ranges(embedder.encode(CALIBRATION, dimensions=width)))
        floats = embedder.encode(TEXTS, dimensions=width)  # truncation first, then quantization
        for name in NAMES:
            got = embedder.encode(TEXTS, precision=name, ranges=path, dimensions=width)
            _same_bytes(got, _st(floats, name, table[w]))
            # row by row: a vector's bytes depend on its floats and the ranges only (the floats of a text
            # alone may differ from its batched ones in the last bit: padding, kernel tiles)
            _same_bytes(got, np.concatenate([_st(floats[i:i + 1], name, table[w]) for i in range(len(TEXTS))]))
            for t in TEXTS[:3]:
                _same_bytes(embedder.encode(t, precision=name, ranges=table[w], dimensions=width),
                            _st(embedder.encode([t], dimensions=width), name, table[w])[0])


def test_the_export_folders_calibration_file_is_the_default(calibrated, private_copy, tmp_path, capsys):
    folder, _, _ = calibrated("qwen3")
    own = private_copy(folder)
    inputs = tmp_path / "calibration.txt"
    inputs.write_text("\n".join(CALIBRATION) + "\n", encoding="utf-8")
    assert main(["calibrate", str(own), "--input", str(inputs), "--dimensions", "16"]) == 0
    assert main(["calibrate", str(own), "--input", str(inputs)]) == 0  # merged: both widths kept
    embedder = Embedder(own, threads=1)
    table = read_ranges(own / CALIBRATION_FILE)
    assert sorted(table) == [16, embedder.dimension]
    for width in (16, None):
        want = _st(embedder.encode(TEXTS, dimensions=width), "int8", table[width or embedder.dimension])
        _same_bytes(embedder.encode(TEXTS, precision="int8", dimensions=width), want)
    with pytest.raises(BitnetOnnxError, match="has ranges for width 16, .* not 32"):
        embedder.encode(TEXTS, precision="uint8", dimensions=32)
    assert "ranges of width 16" in capsys.readouterr().err


def test_a_calibration_file_is_read_once_until_calibrate_rewrites_it(calibrated, tmp_path, monkeypatch):
    """Each calibration file an Embedder scales by (given by path, or the folder's) is read on its first use
    and kept, as the server reads its --ranges once; ``calibrate`` into that path makes the next call read
    the new ranges."""
    folder, path, _ = calibrated("qwen3")
    ranges = tmp_path / "ranges.json"
    shutil.copyfile(path, ranges)
    embedder = Embedder(folder, threads=1)
    reads = []
    monkeypatch.setattr(finishing, "read_ranges", lambda p: reads.append(Path(p)) or read_ranges(p))
    first = embedder.encode(TEXTS, precision="int8", ranges=ranges)
    _same_bytes(embedder.encode(TEXTS, precision="int8", ranges=str(ranges)), first)
    assert reads == [ranges]
    table = embedder.calibrate(TEXTS, path=ranges)  # other texts: other ranges
    assert not np.array_equal(table[embedder.dimension], read_ranges(path)[embedder.dimension])
    want = _st(embedder.encode(TEXTS), "int8", table[embedder.dimension])
    _same_bytes(embedder.encode(TEXTS, precision="int8", ranges=ranges), want)
    assert reads == [ranges, ranges]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_embed_verb_writes_npy_json_and_jsonl(calibrated, tmp_path, capsys, arch):
    folder, path, table = calibrated(arch)
    embedder = Embedder(folder, threads=1)
    inputs = tmp_path / "texts.txt"
    inputs.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    floats = embedder.encode(TEXTS)
    for name in NAMES:
        want = _st(floats, name, table[embedder.dimension])
        out = tmp_path / f"{name}.npy"
        assert main(["embed", str(folder), "--input", str(inputs), "-o", str(out), "--precision", name,
                     *(["--ranges", str(path)] if PRECISIONS[name].needs_ranges else []), "--quiet"]) == 0
        _same_bytes(np.load(out), want)
        assert main(["embed", str(folder), TEXTS[0], TEXTS[1], "--precision", name, "--ranges", str(path)]
                    if PRECISIONS[name].needs_ranges else ["embed", str(folder), TEXTS[0], TEXTS[1], "--precision", name]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert listed == want[:2].tolist() and all(isinstance(v, int) for v in listed[0]) == (name != "float32")
    jsonl = tmp_path / "out.jsonl"
    assert main(["embed", str(folder), "--input", str(inputs), "-o", str(jsonl), "--precision", "binary", "-q"]) == 0
    rows = [json.loads(line)["embedding"] for line in jsonl.read_text().splitlines()]
    assert rows == _st(floats, "binary", None).tolist()


@pytest.mark.parametrize("argv, message", [
    (["--precision", "int4"], "precision must be one of float32, int8, uint8, binary, ubinary, got 'int4'"),
    (["--precision", "int8"], "precision int8 needs calibration ranges [2, "),
    (["--precision", "uint8", "--ranges", "{wrong_shape}"], "wrong_shape.npy has ranges for width 5, not 128"),
    (["--precision", "int8", "--ranges", "{not_finite}"], "holds a value that is not finite (dimension 2)"),
    (["--precision", "int8", "--ranges", "{missing}"], "missing.npy"),
])
def test_bad_precision_arguments_are_one_line_and_write_nothing(calibrated, tmp_path, capsys, argv, message):
    folder, _, table = calibrated("qwen3")
    dim = Embedder(folder, threads=1).dimension
    np.save(tmp_path / "wrong_shape.npy", np.zeros((2, 5), np.float32))
    bad = table[dim].copy()
    bad[1, 2] = np.inf
    np.save(tmp_path / "not_finite.npy", bad)
    names = {k: str(tmp_path / f"{k}.npy") for k in ("wrong_shape", "not_finite", "missing")}
    out = tmp_path / "out.npy"
    code = main(["embed", str(folder), "a text", "-o", str(out), *[a.format(**names) for a in argv]])
    err = capsys.readouterr().err
    assert code != 0 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == sorted(tmp_path.iterdir()) and \
        {p.name for p in tmp_path.iterdir()} == {"wrong_shape.npy", "not_finite.npy"}


# The modules of precision tests against sentence-transformers' quantize_embeddings (the third through its
# encode(precision=...)): each imports sentence-transformers at its top, whose package imports the module
PRECISION_MODULES = ("test_precision.py", "test_serve_precision.py", "test_integrations_sentence_transformers.py")

# A pytest plugin that makes sentence_transformers.util.quantization unimportable, as if it had moved
BLOCK_QUANTIZATION = """\
import sys

MOVED = "sentence_transformers.util.quantization"


class Moved:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == MOVED:
            raise ModuleNotFoundError(f"No module named {MOVED!r}", name=MOVED)
        return None


assert MOVED not in sys.modules
sys.meta_path.insert(0, Moved)
"""


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_moved_quantization_module_fails_the_precision_tests(tmp_path):
    """The precision tests' reference is sentence-transformers' own function: if its module moves, they
    fail (a collection error naming the module), never skip. Slow: the child imports torch (through
    sentence-transformers' package) before it reaches the module, 8-13 s here."""
    (tmp_path / "block_quantization.py").write_text(BLOCK_QUANTIZATION)
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "block_quantization", "-p", "no:cacheprovider",
                          "-p", "no:xdist", "--collect-only", "-q", "-rfEs",
                          *(str(tests / name) for name in PRECISION_MODULES)],
                         capture_output=True, text=True, timeout=240, cwd=tests.parent, env=env)
    out = run.stdout + run.stderr
    assert run.returncode == pytest.ExitCode.INTERRUPTED, out[-4000:]  # errors during collection
    for name in PRECISION_MODULES:
        assert f"ERROR tests/{name}" in out, out[-4000:]
    assert out.count("No module named 'sentence_transformers.util.quantization'") >= len(PRECISION_MODULES), out[-4000:]
    assert "skipped" not in out and "SKIPPED" not in out, out[-4000:]


def test_check_ranges_and_calibration_refuse_what_cannot_scale():
    with pytest.raises(BitnetOnnxError, match=r"maximum below minimum in dimension 1"):
        check_ranges([[0, 1, 0], [1, 0, 1]], 3)
    with pytest.raises(BitnetOnnxError, match="at least 2 embeddings"):
        calibration_ranges(np.zeros((1, 4), np.float32))
    with pytest.raises(BitnetOnnxError, match="precision must be one of float32, int8, uint8, binary, ubinary"):
        quantize(np.zeros((1, 4), np.float32), "fp8")


# ---- export --output-precision -------------------------------------------------------------------

def _graph_output(folder: Path, embedder: Embedder, texts) -> np.ndarray:
    """sentence_embedding as any ONNX Runtime host gets it (plain session, token ids in)."""
    import onnxruntime as ort

    from bitnet_onnx.customops import session_options

    options = session_options()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(folder / "model.onnx"), options)
    ids, mask = embedder.prepare(texts).padded()
    return session.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})[0]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_in_graph_precision_equals_quantize_embeddings(calibrated, tiny_model, tmp_path, arch):
    folder, path, table = calibrated(arch)
    float_embedder = Embedder(folder, threads=1)
    floats = _graph_output(folder, float_embedder, TEXTS)
    dim = float_embedder.dimension
    for name in NAMES[1:]:
        out = tmp_path / name
        ranges = ["--output-ranges", str(path)] if PRECISIONS[name].needs_ranges else []
        assert main(["export", str(tiny_model(arch)), "-o", str(out), "--output-precision", name, *ranges]) == 0
        assert Manifest.read(out).output_precision == name
        want = _st(floats, name, table[dim])
        _same_bytes(_graph_output(out, float_embedder, TEXTS), want)
        quantized = Embedder(out, threads=1)  # the graph's bytes as they are, batch or one by one
        _same_bytes(quantized.encode(TEXTS), want)
        _same_bytes(quantized.encode(TEXTS[2]), _st(float_embedder.encode([TEXTS[2]]), name, table[dim])[0])
        _same_bytes(float_embedder.encode(TEXTS, precision=name, ranges=path), want)
        with pytest.raises(BitnetOnnxError, match="from its graph"):
            quantized.encode(TEXTS, dimensions=8)
        with pytest.raises(BitnetOnnxError, match="from its graph"):
            quantized.encode(TEXTS, precision="float32" if name != "float32" else "int8")


DENSE_WIDTH = 90  # 11 bytes of bits and 2 more: the last byte of each row is 6 bits of padding


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_in_graph_bits_of_a_width_not_a_multiple_of_8(tiny_model, tiny_export, arch):
    """The hidden sizes are multiples of 128 (I2_S's block), so only a Dense layer's width reaches the
    graph's Pad branch: the missing bits of the last byte are zeros after the row's own (numpy's
    packbits per row); without the Pad, the Reshape to groups of 8 fails."""
    model = tiny_model(arch, dense=True, dense_width=DENSE_WIDTH)
    float_folder = tiny_export(model)
    float_embedder = Embedder(float_folder, threads=1)
    assert float_embedder.dimension == DENSE_WIDTH
    floats = _graph_output(float_folder, float_embedder, TEXTS)
    for name in ("binary", "ubinary"):
        folder = tiny_export(model, output_precision=name)
        graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
        assert any(node.op_type == "Pad" and f"output_{name}" in node.name for node in graph.node), \
            [node.name for node in graph.node if node.op_type == "Pad"]
        want = _st(floats, name, None)
        assert want.shape == (len(TEXTS), 12)
        _same_bytes(_graph_output(folder, float_embedder, TEXTS), want)
        _same_bytes(Embedder(folder, threads=1).encode(TEXTS), want)


def test_in_graph_precision_with_strings_in(tiny_model, tiny_export, tmp_path):
    """export --text-input --output-precision: model_text.onnx ends in the same bytes (Gemma3: our own
    tokenizer op, no onnxruntime-extensions needed)."""
    model = tiny_model("gemma3")
    out = tmp_path / "text-bits"
    assert main(["export", str(model), "-o", str(out), "--text-input", "--output-precision", "binary"]) == 0
    strings_in = Embedder(out, threads=1)
    assert strings_in.text_input
    floats = Embedder(tiny_export(model), threads=1).encode(TEXTS)
    _same_bytes(strings_in.encode(TEXTS), _st(floats, "binary", None))


def test_export_output_precision_refusals(calibrated, tiny_model, tmp_path, capsys):
    _, path, table = calibrated("qwen3")
    model = tiny_model("qwen3")
    cases = [
        (["--output-precision", "int8"], "--output-precision int8 needs --output-ranges FILE"),
        (["--output-precision", "ubinary", "--layout", "hf"], "--layout hf"),
        (["--output-precision", "fp4"], "--output-precision must be one of float32, int8, uint8, binary, ubinary"),
    ]
    np.save(tmp_path / "narrow.npy", table[20])
    cases.append((["--output-precision", "uint8", "--output-ranges", str(tmp_path / "narrow.npy")],
                  "narrow.npy has ranges for width 20, not 128"))
    for argv, message in cases:
        out = tmp_path / "out"
        assert main(["export", str(model), "-o", str(out), *argv]) != 0
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
        assert not out.exists()


# ---- the real Qwen3-0.6B widths -----------------------------------------------------------------

@pytest.fixture(scope="module")
def real_width_export(real_width_model, tmp_path_factory):
    """Qwen3-0.6B's released widths (hidden 1024, vocabulary 151936) with one layer (conftest's shared
    real_width_model): a float32 export and its in-graph ubinary twin."""
    from bitnet_onnx.export.exporter import export

    model = real_width_model("qwen3", layers=1)
    root = tmp_path_factory.mktemp("real-width")
    return export(model, root / "f32"), export(model, root / "ubinary", output_precision="ubinary")


@pytest.mark.real_size
def test_real_widths_every_precision_and_the_graphs_bits(real_width_export):
    folder, packed = real_width_export
    embedder = Embedder(folder, threads=2)
    assert embedder.dimension == 1024
    calib = embedder.encode(CALIBRATION)
    ranges = calibration_ranges(calib)
    floats = embedder.encode(TEXTS)
    for name in NAMES:
        _same_bytes(embedder.encode(TEXTS, precision=name, ranges=ranges), _st(floats, name, ranges))
    bits = Embedder(packed, threads=2).encode(TEXTS)
    assert bits.shape == (len(TEXTS), 128)
    _same_bytes(bits, _st(floats, "ubinary", None))
    _same_bytes(embedder.encode(TEXTS, precision="binary", dimensions=256), _st(floats[:, :256], "binary", None))
