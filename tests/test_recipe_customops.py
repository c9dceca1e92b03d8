"""The "Add a kernel ISA" and "Add a custom op" recipes of docs/contributing.md, kept true: each
test fails when a step of a recipe is skipped (a name missing from a table, a page, a version)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bitnet_onnx import customops
from bitnet_onnx.export.builder import DOMAIN_VERSIONS
from bitnet_onnx.ternary import pack_i2s
from cpu_isas import ISA_FLAGS

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
KERNELS = customops.library_kernels()
RUNNING = [isa.name for isa in KERNELS if isa.runs]


# -- Add a kernel ISA ------------------------------------------------------------------------------

def test_every_isa_has_a_cpuinfo_mapping():
    """Step: tests/cpu_isas.py maps each ISA of the table (but scalar) to its /proc/cpuinfo flags,
    on one machine, and names no ISA the table lacks."""
    mapped = [name for table in ISA_FLAGS.values() for name in table]
    table = [isa.name for isa in KERNELS]
    assert sorted(mapped) == sorted(name for name in table if name != "scalar"), (mapped, table)
    assert len(mapped) == len(set(mapped)), mapped


def _i2s_model() -> bytes:
    k, n = 128, 32
    w = pack_i2s(np.zeros((n, k), np.int8))
    node = helper.make_node("I2STernaryMatMul", ["X", "W", "scale"], ["Y"], domain=customops.DOMAIN)
    graph = helper.make_graph([node], "i2s", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(w, "W"),
                                           numpy_helper.from_array(np.array([0.5], np.float32), "scale")])
    return _model(graph)


def _attention_model() -> bytes:
    node = helper.make_node("EncoderAttention", ["q", "k", "v", "mask"], ["y"], domain=customops.DOMAIN,
                            num_heads=2, kv_num_heads=1)
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in "qkv"]
    inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT64, None))
    graph = helper.make_graph([node], "attention", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return _model(graph)


def _model(graph) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(customops.DOMAIN, customops.DOMAIN_VERSION)])
    model.ir_version = 10
    return model.SerializeToString()


@pytest.mark.parametrize("isa", RUNNING)
def test_every_isa_this_cpu_runs_has_an_i2s_kernel_and_an_attention_path(isa, monkeypatch):
    """Step: each family maps the ISA (kernels/i2s/dispatch.cc, kernels/attention/dispatch.cc).
    (A family table without a row for an ISA does not compile: isa.h's isa_row.)"""
    monkeypatch.setenv(customops.ISA_ENV, isa)
    options = customops.session_options(threads=1)
    i2s = ort.InferenceSession(_i2s_model(), options, providers=["CPUExecutionProvider"])
    (y,) = i2s.run(None, {"X": np.ones((1, 128), np.float32)})
    assert y.shape == (1, 32) and not y.any()  # all-zero ternary weights
    attention = ort.InferenceSession(_attention_model(), options, providers=["CPUExecutionProvider"])
    q = np.ones((1, 3, 8), np.float32)
    (out,) = attention.run(None, {"q": q, "k": q[:, :, :4], "v": q[:, :, :4], "mask": np.ones((1, 3), np.int64)})
    np.testing.assert_array_equal(out, q)  # equal values: softmax-weighted mean of ones


def test_isa_table_order_and_names():
    """Step: the record goes into the table best first; scalar, the fallback, stays last."""
    names = [isa.name for isa in KERNELS]
    assert names[-1] == "scalar" and len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]+", name) for name in names), names


# -- Add a custom op -------------------------------------------------------------------------------

LIBRARY_OPS = customops.library_ops()[1]


def test_every_op_has_a_python_schema():
    """Step: a row in SCHEMAS (bitnet_onnx/customops) that builds an onnx schema of the domain."""
    assert sorted(customops.SCHEMAS) == sorted(LIBRARY_OPS)
    for name in LIBRARY_OPS:
        schema = customops.SCHEMAS[name](customops.DOMAIN, customops.DOMAIN_VERSION)
        assert (schema.name, schema.domain, schema.since_version) == (name, customops.DOMAIN, customops.DOMAIN_VERSION)


def _heading(op: str) -> str:
    return f"# {op} (domain `{customops.DOMAIN}`, version {customops.DOMAIN_VERSION})"


@pytest.mark.parametrize("op", LIBRARY_OPS)
def test_every_op_has_a_contract_page(op):
    """Step: a section of docs/op.md, or a page of its own that docs/architecture.md links, whose
    title names the op, the domain and the version; and a row in architecture.md's op table."""
    architecture = (DOCS / "architecture.md").read_text()
    pages = [DOCS / "op.md"] + [DOCS / link for link in re.findall(r"\]\(([\w.-]+\.md)\)", architecture)]
    assert any(_heading(op) in page.read_text().splitlines() for page in pages if page.is_file()), (
        f"no '{_heading(op)}' in docs/op.md nor in a page docs/architecture.md links")
    assert re.search(rf"^\| `{op}` \|", architecture, flags=re.M), f"docs/architecture.md's op table has no row for {op}"


def test_domain_versions_agree():
    """Step: the op declares the domain versions of customops/ort/domain.h (through op_template.h),
    the one version Python's face and the graph builder import."""
    header = (REPO / "customops" / "ort" / "domain.h").read_text()
    declared = {name: int(value) for name, value in re.findall(r"kDomainVersion(First|Last) = (\d+);", header)}
    assert declared == {"First": customops.DOMAIN_VERSION, "Last": customops.DOMAIN_VERSION}, declared
    assert DOMAIN_VERSIONS[customops.DOMAIN] == customops.DOMAIN_VERSION


def test_every_op_is_defined_through_the_op_template():
    """Step: the op's file states its ports and kernel class and returns op_definition<Kernel>(),
    which declares the domain versions; the op table lists it (and so the library does)."""
    table = (REPO / "customops" / "ort" / "op_table.h").read_text()
    rows = re.findall(r'\{"(\w+)", (\w+)\}', table)
    assert sorted(name for name, _ in rows) == sorted(LIBRARY_OPS)
    sources = "\n".join(path.read_text() for path in (REPO / "customops" / "ort").glob("*_op.cc"))
    for _, function in rows:
        assert re.search(rf"OrtCustomOp\* {function}\(\) {{ return op_definition<\w+>\(\); }}", sources), function
    assert "CustomOpBase<" not in sources  # only op_template.h derives from it
