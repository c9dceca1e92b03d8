"""What I2STernaryMatMul refuses (docs/op.md): attributes of the wrong type, K beyond the exact
int32 range, and graphs importing a version of the domain the library does not implement."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from bitnet_onnx import customops
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.manifest import Manifest
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


@pytest.mark.parametrize("version", [2, 1000])
def test_onnx_runtime_itself_runs_another_domain_version_with_this_library(version):
    """Why the hosts check the import (docs/op.md, "Version"): ONNX Runtime does not refuse a graph importing
    a later version of the domain; it runs the version-1 kernel, the same bytes. Should an ONNX Runtime
    start refusing, this fails and the docs' statement is to be changed."""
    x = np.random.default_rng(0).standard_normal((3, 128)).astype(np.float32)
    want = ort.InferenceSession(_model(), customops.session_options()).run(None, {"X": x})[0]
    got = ort.InferenceSession(_model(domain_version=version), customops.session_options()).run(None, {"X": x})[0]
    assert got.tobytes() == want.tobytes()
