"""I2STernaryMatMul's kernel families beside the multiply one (the rows of customops/kernels/i2s/families.h
after mul: lut, the lookup kernels; mul_direct, the multiply kernels' direct path at every M; mixed, multiply
rows and lookup rows co-issued) through onnxruntime.

BITNET_ONNX_KERNEL=<family> forces a family (read when a session creates the op's kernel, beside
BITNET_ONNX_ISA); unset, the op picks one per call (measured on the host: kernels/i2s/measured_choice.h). The
families compute the same exact int32 sums and the same float epilogue, so their outputs must be
identical bit for bit, on every ISA path this CPU has, and match the numpy reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_op import assert_matches_reference, make_model, random_case, session

from bitnet_onnx.customops import KERNEL_ENV, dispatch
from bitnet_onnx.ternary import pack_i2s
from cpu_isas import isas_of_this_cpu

ISAS = isas_of_this_cpu()
DISPATCH = dispatch({})
FAMILIES = [family.name for family in DISPATCH.families]  # the library's table, mul first
# (ISA, family) for every family but mul that has a kernel on an ISA of this CPU (forcing one elsewhere fails).
FORCED = [pytest.param(isa, family, id=f"{isa}-{family}") for family in FAMILIES[1:] for isa in ISAS
          if DISPATCH.kernel(isa, family) is not None]


def run(model: bytes, x: np.ndarray, isa: str, family: str | None, monkeypatch, threads: int = 1) -> np.ndarray:
    if family is None:
        monkeypatch.delenv(KERNEL_ENV, raising=False)
    else:
        monkeypatch.setenv(KERNEL_ENV, family)
    return session(model, isa, monkeypatch, threads).run(None, {"X": x})[0]


# (K, N, M): the projection widths of Qwen3-0.6B (hidden 1024, q 2048, gate/up 3072, down K 3072)
# and Gemma3-270M (hidden 640, k/v 256, intermediate 2048), M around the token-block edges of the
# lookup kernels (16 tokens per ymm table, 32 per zmm) and a large M; scalar runs the small ones.
SHAPES = [
    (1024, 2048, 16),
    (1024, 1024, 33),
    (3072, 1024, 17),
    (640, 256, 513),
    (640, 2048, 31),
    (2048, 640, 1),
    (128, 7, 15),
    pytest.param(1024, 3072, 2048, marks=pytest.mark.slow),  # ~7 s per ISA: the quick loop leaves it out
]


def _big(k, n, m):
    return k * n * m > 200_000_000


@pytest.mark.parametrize("isa, family", FORCED)
@pytest.mark.parametrize("k, n, m", SHAPES, ids=lambda v: str(v))
def test_family_equals_multiply_bit_for_bit(isa, family, k, n, m, monkeypatch):
    if isa == "scalar" and _big(k, n, m):
        m = 64  # the scalar references are slow; the big M runs on the SIMD paths
    rng = np.random.default_rng(k * 7 + n * 3 + m)
    x, w, scale, nw = random_case(rng, k, n, (m, k), np.float32)
    model = make_model(k, n, w, scale, nw)
    y_family = run(model, x, isa, family, monkeypatch)
    y_mul = run(model, x, isa, "mul", monkeypatch)
    np.testing.assert_array_equal(y_family, y_mul)
    assert_matches_reference(y_family, x, w, scale, nw)
    np.testing.assert_array_equal(run(model, x, isa, None, monkeypatch), y_mul)  # whichever the op picks


@pytest.mark.parametrize("isa, family", FORCED)
def test_extreme_activations_and_zero_rows(isa, family, monkeypatch):
    """All activations quantized to +-127 (constant rows) against all +1 / -1 / alternating weights,
    zero weight rows and zero (hence NaN-free, all-zero) token rows: the largest int16 partial sums."""
    k, n = 3072, 40
    t = np.zeros((n, k), np.int8)
    t[0::4] = 1
    t[1::4] = -1
    t[2::4] = np.resize(np.array([1, -1], np.int8), k)
    w = pack_i2s(t)
    x = np.ones((37, k), np.float32)
    x[1::3] *= -1.0
    x[2::3] = 0.0
    model = make_model(k, n, w, 0.02)
    y_family = run(model, x, isa, family, monkeypatch)
    np.testing.assert_array_equal(y_family, run(model, x, isa, "mul", monkeypatch))
    assert_matches_reference(y_family, x, w, np.float32(0.02), None)


@pytest.mark.parametrize("family", FAMILIES[1:])
def test_family_with_w_fed_at_run_time_and_two_threads(family, monkeypatch):
    rng = np.random.default_rng(5)
    k, n, m = 1024, 1024, 100
    x, w, scale, nw = random_case(rng, k, n, (m, k), None)
    for isa in ISAS:
        if DISPATCH.kernel(isa, family) is None:
            continue
        model = make_model(k, n, w, scale, nw, w_const=False)
        monkeypatch.setenv(KERNEL_ENV, family)
        sess1 = session(model, isa, monkeypatch, threads=1)
        sess2 = session(model, isa, monkeypatch, threads=2)
        y1 = sess1.run(None, {"X": x, "W": w})[0]
        y2 = sess2.run(None, {"X": x, "W": w})[0]
        np.testing.assert_array_equal(y1, y2)
        assert_matches_reference(y1, x, w, scale, nw)


@pytest.mark.parametrize("value", ["lookup", "LUT", "mul,lut", " "])
def test_bad_kernel_family_is_a_clear_error(value, monkeypatch):
    w = pack_i2s(np.zeros((1, 128), dtype=np.int8))
    monkeypatch.setenv(KERNEL_ENV, value)
    expected = ", ".join(["measure", "rules", *FAMILIES[:-1]]) + " or " + FAMILIES[-1]
    with pytest.raises(Exception, match=rf"BITNET_ONNX_KERNEL={value}: unknown kernel family; expected {expected}"):
        session(make_model(128, 1, w), None, monkeypatch)
