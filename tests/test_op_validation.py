"""What I2STernaryMatMul refuses (docs/op.md): attributes of the wrong type, K beyond the exact
int32 range, and graphs importing a version of the domain the library does not implement."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper

from bitnet_onnx import customops
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime import session
from bitnet_onnx.runtime.session import create_session
from bitnet_onnx.ternary import pack_i2s

from cpu_isas import isas_of_this_cpu


def _model(k: int = 128, n: int = 2, domain_version: int = 1, **attrs) -> bytes:
    w = pack_i2s(np.ones((n, k), np.int8))
    node = helper.make_node("I2STernaryMatMul", ["X", "W", "scale"], ["Y"], domain=customops.DOMAIN, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])],
        [helper.make_tensor("W", TensorProto.UINT8, w.shape, w.tobytes(), raw=True),
         helper.make_tensor("scale", TensorProto.FLOAT, [1], [1.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(customops.DOMAIN, domain_version)]).SerializeToString()


@pytest.mark.parametrize("value", [3, "1e-6", [1e-6, 1e-6], [1, 2]])
def test_epsilon_of_another_type_is_an_error(value):
    with pytest.raises(Exception, match="attribute 'epsilon' must be a float"):
        ort.InferenceSession(_model(epsilon=value), customops.session_options())


def test_a_float_epsilon_and_no_epsilon_run():
    for attrs in ({"epsilon": 1e-5}, {}):
        sess = ort.InferenceSession(_model(**attrs), customops.session_options())
        np.testing.assert_array_equal(sess.run(None, {"X": np.ones((1, 128), np.float32)})[0], [[128.0, 128.0]])


MAX_K = (1 << 24) - 128  # the largest multiple of 128 with 128 * K < 2^31


def test_k_beyond_the_exact_range_is_an_error():
    with pytest.raises(Exception, match=f"K = {MAX_K + 128} is beyond {MAX_K}"):
        ort.InferenceSession(_model(k=MAX_K + 128, n=1), customops.session_options())


@pytest.mark.parametrize("isa", isas_of_this_cpu())
def test_the_widest_k_is_exact_on_every_isa(monkeypatch, isa):
    monkeypatch.setenv(customops.ISA_ENV, isa)
    sess = ort.InferenceSession(_model(k=MAX_K, n=1), customops.session_options())
    for value in (-1.0, 1.0):  # q = -+127 everywhere: the largest sums
        x = np.full((1, MAX_K), value, np.float32)
        assert sess.run(None, {"X": x})[0][0, 0] == np.float32(value * MAX_K)


def test_runtime_refuses_another_domain_version(tiny_model, tiny_export, private_copy):
    folder = private_copy(tiny_export(tiny_model("qwen3"), "i2s"))
    manifest = Manifest.read(folder)
    model = onnx.load(str(folder / manifest.model_file))
    for opset in model.opset_import:
        if opset.domain == customops.DOMAIN:
            opset.version = 2
    onnx.save(model, str(folder / manifest.model_file))
    with pytest.raises(BitnetOnnxError, match="imports domain 'bitnet_onnx' version 2; this op library implements version 1"):
        create_session(folder, manifest)


def test_the_domain_check_reads_the_opset_imports_onnx_reads(tiny_model, tiny_export, tmp_path):
    """The runtime reads a graph's opset imports without the onnx package (runtime/session.py says why):
    the same dict as onnx's on the exports of every kind that imports our domain or not, on a graph that
    names a domain twice (the last one counts in both), and nothing but an error on bytes that are no model."""
    folders = [tiny_export(tiny_model("qwen3"), weights) for weights in ("i2s", "f32", "int8")]
    graphs = [folder / Manifest.read(folder).model_file for folder in folders]
    twice = onnx.load_from_string(_model(domain_version=3))
    twice.opset_import.append(helper.make_opsetid(customops.DOMAIN, 7))
    graphs.append(tmp_path / "twice.onnx")
    graphs[-1].write_bytes(twice.SerializeToString())
    for graph in graphs:
        want = {o.domain: o.version for o in onnx.load(str(graph), load_external_data=False).opset_import}
        assert session._opset_imports(graph) == want, graph
    assert session._opset_imports(graphs[-1])[customops.DOMAIN] == 7
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 64)
    with pytest.raises(DecodeError):
        session._opset_imports(tmp_path / "junk.onnx")


def test_embedding_with_our_library_does_not_import_onnx(tiny_model, tiny_export):
    """What the reader above is for: a process that embeds with an i2s export (a CLI run, a server, a Ray
    actor) never pays the onnx package's import."""
    folder = tiny_export(tiny_model("qwen3"), "i2s")
    code = (f"import sys; from bitnet_onnx import Embedder; Embedder({str(folder)!r}, threads=1).encode('a'); "
            "print(sorted(m for m in sys.modules if m == 'onnx' or m.startswith('onnx.')))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip() == "[]"


@pytest.mark.parametrize("version", [2, 1000])
def test_onnx_runtime_itself_runs_another_domain_version_with_this_library(version):
    """Why the hosts check the import (docs/op.md, "Version"): ONNX Runtime does not refuse a graph importing
    a later version of the domain; it runs the version-1 kernel, the same bytes. Should an ONNX Runtime
    start refusing, this fails and the docs' statement is to be changed."""
    x = np.random.default_rng(0).standard_normal((3, 128)).astype(np.float32)
    want = ort.InferenceSession(_model(), customops.session_options()).run(None, {"X": x})[0]
    got = ort.InferenceSession(_model(domain_version=version), customops.session_options()).run(None, {"X": x})[0]
    assert got.tobytes() == want.tobytes()
