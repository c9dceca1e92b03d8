"""The weight-format table (bitnet_onnx.formats): every record complete, every pack paired with its
unpack, and every fact read from the table by the parts that use it."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import numpy as np
import pytest

from bitnet_onnx import formats
from bitnet_onnx.commands import export as export_verb
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.export import attention, projections
from bitnet_onnx.formats import FORMATS, MIN_ONNXRUNTIME, NAMES, ProjectionWeight, WeightFormat
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.reference import ACTIVATION_MODES
from bitnet_onnx.ternary import BLOCK, pack_i2s

REQUIRED = [f.name for f in dataclasses.fields(WeightFormat)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def _ternary(n: int = 6, k: int = 2 * BLOCK, seed: int = 0) -> tuple[np.ndarray, float]:
    t = np.random.default_rng(seed).integers(-1, 2, size=(n, k)).astype(np.int8)
    return t, 0.0371


def _bits(fmt: WeightFormat) -> list[int]:
    return list(fmt.bits) or [4]


def test_the_record_fields_are_the_ones_the_recipe_names():
    """docs/contributing.md "Add a weight format" lists these; a new field goes there too."""
    assert REQUIRED == ["name", "ternary_only", "default_attention", "reference_activations", "pack", "unpack"]


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_record_is_complete(name):
    fmt = FORMATS[name]
    assert fmt.name == name
    assert isinstance(fmt.ternary_only, bool)
    assert fmt.default_attention in attention.STRATEGIES, f"{name}: default_attention names no strategy"
    assert fmt.reference_activations in ACTIVATION_MODES, f"{name}: no such reference mode"
    assert callable(fmt.pack) and callable(fmt.unpack), f"{name}: a pack needs its unpack"
    assert [p.name for p in inspect.signature(fmt.pack).parameters.values()] == ["w", "bits"]
    assert [p.name for p in inspect.signature(fmt.unpack).parameters.values()] == ["stored", "bits"]
    assert name in projections.BUILDERS, f"{name}: no projection builder in export/projections.py BUILDERS"
    assert set(fmt.min_onnxruntime_by_bits) <= set(fmt.bits), f"{name}: an ORT floor for a width it lacks"
    for bits in _bits(fmt):
        assert tuple(int(p) for p in fmt.min_onnxruntime(bits).split(".")) >= (1, 21)


def test_builders_and_records_name_the_same_formats():
    assert set(projections.BUILDERS) == set(FORMATS)
    assert NAMES == tuple(FORMATS)


@pytest.mark.parametrize("name", list(FORMATS))
def test_unpack_undoes_pack_exactly_for_ternary_weights(name):
    fmt = FORMATS[name]
    t, s_w = _ternary()
    want = t.astype(np.float32) * np.float32(s_w)
    if name == "f16":  # the one format that stores s_w * T rounded: to float16, once
        want = want.astype(np.float16).astype(np.float32)
    for bits in _bits(fmt):
        w = ProjectionWeight(np.zeros(t.shape, np.float32), ternary=True, codes=(pack_i2s(t), s_w))
        got = fmt.unpack(fmt.stored(w, bits), bits)
        assert got.dtype == np.float32 and got.shape == t.shape
        assert np.array_equal(got, want), f"{name} bits={bits}: unpack(pack(w)) != s_w * T"


@pytest.mark.parametrize("name", [n for n, f in FORMATS.items() if not f.ternary_only])
def test_unpack_undoes_pack_for_float_weights(name):
    """Formats that store standard weights: f32 exactly, f16 to its rounding, int8 within half a step."""
    fmt = FORMATS[name]
    weight = np.random.default_rng(1).standard_normal((5, 3 * BLOCK)).astype(np.float32)
    got = fmt.unpack(fmt.stored(ProjectionWeight(weight, ternary=False), 4), 4)
    step = np.abs(weight).max(axis=1, keepdims=True) / 127
    tolerance = {"f32": 0.0, "f16": np.abs(weight) * 2.0 ** -11, "int8": step / 2 * (1 + 1e-6)}[name]
    assert got.shape == weight.shape and np.all(np.abs(got - weight) <= tolerance)


@pytest.mark.parametrize("name", [n for n, f in FORMATS.items() if f.ternary_only])
def test_ternary_only_formats_refuse_float_weights(name):
    weight = np.ones((2, BLOCK), np.float32)
    with pytest.raises(BitnetOnnxError, match=f"--weights {name} needs a BitNet model"):
        FORMATS[name].stored(ProjectionWeight(weight, ternary=False), 4)


@pytest.mark.parametrize("name", [n for n, f in FORMATS.items() if f.block])
def test_block_formats_refuse_a_width_off_the_block(name):
    weight = np.ones((2, BLOCK + 4), np.float32)
    with pytest.raises(BitnetOnnxError, match=f"input width {BLOCK + 4} is not a multiple of {BLOCK}"):
        FORMATS[name].stored(ProjectionWeight(weight, ternary=True, name="q_proj"), 4)


def test_the_nbits_unpacker_inverts_the_packer_at_each_width():
    t, _ = _ternary(3, 4 * BLOCK, seed=2)
    for bits in FORMATS["nbits"].bits:
        packed = formats.pack_nbits(t, bits)
        assert packed.shape == (3, 4, BLOCK * bits // 8)
        assert np.array_equal(formats.unpack_nbits(packed, bits), t)


def test_facts_are_read_from_the_table():
    assert attention.choose(None, "i2s") == "fused" and attention.choose(None, "int8") == "onnx"
    assert FORMATS["nbits"].min_onnxruntime(2) == "1.24" and FORMATS["nbits"].min_onnxruntime(4) == MIN_ONNXRUNTIME
    assert Manifest.min_onnxruntime == MIN_ONNXRUNTIME
    assert formats.DEFAULT_TERNARY in FORMATS and not FORMATS[formats.DEFAULT_FLOAT].ternary_only
    with pytest.raises(BitnetOnnxError, match=r"--weights 'q4' is not one of i2s, f32, f16, int8, nbits"):
        formats.weight_format("q4")


def test_to_float16_names_the_tensor_beyond_its_range():
    with pytest.raises(BitnetOnnxError, match="tensor embed: value 70000 is beyond float16's range"):
        formats.to_float16(np.array([70000.0], np.float32), "embed")
    with pytest.raises(BitnetOnnxError, match="tensor embed: value 70000 is beyond"):  # either sign
        formats.to_float16(np.array([1.0, -70000.0], np.float32), "embed")
    edge = np.array([-formats.FLOAT16_MAX, formats.FLOAT16_MAX], np.float32)
    assert np.array_equal(formats.to_float16(edge, "x"), edge.astype(np.float16))
    assert formats.to_float16(np.array([1.5], np.float32), "x").dtype == np.float16


def test_every_format_is_described_by_the_export_verb():
    described = export_verb.EPILOG.split("weights:", 1)[1]
    assert [name for name in FORMATS if name not in described] == [], "add it to EPILOG's weights: paragraph"


def test_to_float16_rounds_as_numpy_at_every_float16_boundary():
    """to_float16 casts on ONNX Runtime (formats._float16_cast says why): the same bits as numpy's cast for
    every finite float16 value, the float32 midpoint between each two neighbours (where round-to-nearest-even
    decides) and the float32 values either side of it, subnormals and both zeros among them; shapes kept."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = np.sort(halves[np.isfinite(halves)].astype(np.float32))
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)  # exact: 11-bit significands
    values = np.concatenate([finite, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                             np.float32([0.0, -0.0, 1e-9, -1e-9]),
                             np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32) * 0.05])
    got, want = formats.to_float16(values, "x"), values.astype(np.float16)
    assert got.dtype == np.float16 and np.array_equal(got.view(np.uint16), want.view(np.uint16))
    table = values[:6 * 4096].reshape(6, 4096)
    assert np.array_equal(formats.to_float16(table, "x").view(np.uint16), table.astype(np.float16).view(np.uint16))
    into = np.empty(table.size, np.float16)  # out=: written in place (tensor_f16's chunks), a wrong one refused
    assert np.shares_memory(formats.to_float16(table, "x", out=into), into)
    assert np.array_equal(into.view(np.uint16), table.astype(np.float16).reshape(-1).view(np.uint16))
    with pytest.raises(ValueError, match="out must be a contiguous float16 array of 24576 values"):
        formats.to_float16(table, "x", out=np.empty((4096, 12), np.float16)[:, ::2])


def test_the_float16_cast_model_is_the_one_onnx_builds():
    """formats.FLOAT16_CAST_MODEL, written out so that a cast never imports onnx, is onnx's helper's model."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)], "to_float16",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert model.SerializeToString() == formats.FLOAT16_CAST_MODEL
    code = ("import sys, numpy as np; from bitnet_onnx import formats; "
            "assert formats.to_float16(np.float32([1.0, 0.1]), 'x').tolist() == np.float16([1.0, 0.1]).tolist(); "
            "print('onnx' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip() == "False"
