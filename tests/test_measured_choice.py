"""I2STernaryMatMul's kernel family measured on the host (customops/kernels/i2s/measured_choice.h), through
onnxruntime: with BITNET_ONNX_KERNEL unset the op times every family the node's ISA has on its first calls of each
(ISA, N, K, M bucket), the families taking turns of 2 calls, then runs the fastest. Every call's output is the forced multiply family's bit
for bit, through the trials and after, from concurrent runs too; the library states what it measured
(``dispatch().measured``, one table per process: each test uses an N no other test of the process uses).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest
from test_op import assert_matches_reference, make_model, random_case, session

from bitnet_onnx import customops
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.customops import KERNEL_ENV, i2s_matmul
from bitnet_onnx.export.exporter import export
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.testing.factory import CORPUS
from cpu_isas import isas_of_this_cpu

ISAS = isas_of_this_cpu()
TRIALS = customops.dispatch().trials_per_family  # kTrialsPerFamily (measured_choice.h)
TEXTS = [line for line in CORPUS.splitlines() if line][:6]


def _families(isa: str) -> list[str]:
    """The families the library has for ``isa``: the candidates it measures."""
    dispatch = customops.dispatch()
    return [f.name for f in dispatch.families if dispatch.kernel(isa, f.name) is not None]


def _measured(isa: str, k: int, n: int, m: int) -> customops.MeasuredShape:
    found = [s for s in customops.dispatch().measured
             if (s.isa, s.k, s.n) == (isa, k, n) and s.m_first <= m and (s.m_last is None or m <= s.m_last)]
    assert len(found) == 1, customops.dispatch().measured
    return found[0]


def _forced_mul(model: bytes, feeds: dict, isa: str, monkeypatch) -> np.ndarray:
    monkeypatch.setenv(KERNEL_ENV, "mul")
    return session(model, isa, monkeypatch).run(None, feeds)[0]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("w_const", [True, False], ids=["constant-W", "runtime-W"])
def test_every_call_equals_the_multiply_family_through_the_trials(isa, w_const, monkeypatch):
    k, n, m = 384, 301 + ISAS.index(isa) + 17 * w_const, 40
    rng = np.random.default_rng(n)
    x, w, scale, nw = random_case(rng, k, n, (m, k), np.float32)
    model = make_model(k, n, w, scale, nw, w_const=w_const)
    feeds = {"X": x} if w_const else {"X": x, "W": w}
    want = _forced_mul(model, feeds, isa, monkeypatch)
    assert_matches_reference(want, x, w, scale, nw)
    monkeypatch.delenv(KERNEL_ENV)
    measured = session(model, isa, monkeypatch)
    families = _families(isa)
    for call in range(len(families) * TRIALS + 2):
        np.testing.assert_array_equal(measured.run(None, feeds)[0], want, err_msg=f"call {call}")
    shape = _measured(isa, k, n, m)
    assert shape.runs in families and dict(shape.trials) == {f: TRIALS for f in families}, shape
    assert all(ns is not None and ns > 0 for ns in shape.ns_per_token.values()), shape
    assert (shape.m_first, shape.m_last) == (33, 64), shape  # M = 40's bucket
    described = customops.dispatch(shape=(m, k, n))
    assert (described.shape.runs, described.shape.by) == (shape.runs, "measured"), described.shape
    assert shape.describe().startswith(f"{isa} N={n} K={k} M=33-64: {shape.runs} ("), shape.describe()


def test_concurrent_runs_during_the_trials_all_equal_the_multiply_family(monkeypatch):
    """Four threads run one session while its choice is measured: each output is the multiply family's."""
    isa, k, n, m = ISAS[0], 512, 389, 16
    rng = np.random.default_rng(7)
    x, w, scale, nw = random_case(rng, k, n, (m, k), np.float32)
    model = make_model(k, n, w, scale, nw)
    want = _forced_mul(model, {"X": x}, isa, monkeypatch)
    monkeypatch.delenv(KERNEL_ENV)
    measured = session(model, isa, monkeypatch, threads=2)
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(lambda _: measured.run(None, {"X": x})[0], range(24)))
    for call, y in enumerate(outputs):
        np.testing.assert_array_equal(y, want, err_msg=f"call {call}")
    shape = _measured(isa, k, n, m)
    assert shape.runs in _families(isa) and all(t == TRIALS for t in shape.trials.values()), shape


def test_rules_run_the_compiled_rules_and_measure_nothing(monkeypatch):
    """BITNET_ONNX_KERNEL=rules: the family select_family's rules give (the description says which), same bits,
    and no measured entry for the shape."""
    isa, k, n, m = ISAS[-1], 256, 397, 24
    rng = np.random.default_rng(11)
    x, w, scale, nw = random_case(rng, k, n, (m, k), np.float32)
    model = make_model(k, n, w, scale, nw)
    want = _forced_mul(model, {"X": x}, isa, monkeypatch)
    monkeypatch.setenv(KERNEL_ENV, "rules")
    for _ in range(len(_families(isa)) * TRIALS + 1):
        np.testing.assert_array_equal(session(model, isa, monkeypatch).run(None, {"X": x})[0], want)
    described = customops.dispatch(shape=(m, k, n))
    assert described.forced_family.picks == "rules" and described.shape.by == "rules", described
    assert described.shape.runs in _families(isa), described.shape
    assert not [s for s in described.measured if s.n == n], described.measured


@pytest.mark.parametrize("value, picks", [("", "measure"), ("measure", "measure"), ("rules", "rules"), ("mul", "mul")])
def test_the_variable_values_the_library_reads(value, picks, monkeypatch):
    monkeypatch.setenv(KERNEL_ENV, value)
    assert customops.selected_kernel_family() == picks
    shape = customops.dispatch(shape=(1, 128, 1)).shape
    assert shape.by == {"measure": "measured", "rules": "rules"}.get(picks, "forced"), shape


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.real_size  # the suite's tiers: tests/suite_marks.py
def test_a_real_width_export_measures_its_projections_and_embeds_the_same_bits(tmp_path, real_width_model, arch,
                                                                                 monkeypatch):
    """An i2s export at the released widths and vocabulary (few layers): under the measured choice its embeddings
    are the forced multiply family's bit for bit, on every call through the trials and after, and the library has
    chosen a family for every projection shape of the graph."""
    model = real_width_model(arch, layers=1 if arch == "qwen3" else 2)
    folder = export(model, tmp_path / "i2s", weights="i2s")
    monkeypatch.setenv(KERNEL_ENV, "mul")
    want = Embedder(folder).encode(TEXTS)
    monkeypatch.delenv(KERNEL_ENV)
    measured = Embedder(folder)
    isa = customops.selected_isa()
    # q, o and down have shapes of their own: one call each per forward pass, so a pass per trial of every family
    for call in range(len(_families(isa)) * TRIALS + 2):
        np.testing.assert_array_equal(measured.encode(TEXTS), want, err_msg=f"encode {call}")
    graph = onnx.load(str(folder / Manifest.read(folder).model_file), load_external_data=False).graph
    weights = {t.name: tuple(t.dims) for t in graph.initializer}
    shapes = {(weights[node.input[1]][0], 4 * weights[node.input[1]][1])
              for node in graph.node if node.op_type == i2s_matmul.NAME}
    chosen = {(s.n, s.k) for s in customops.dispatch().measured if s.isa == isa and s.runs is not None}
    assert shapes and shapes <= chosen, (shapes, customops.dispatch().measured)
