"""The library's whole dispatch as it states it (bitnet_onnx_dispatch, customops.dispatch()): the same table as
its other exports, the picks the op itself makes for every forced value, and the declared CPU-flag oracle of
tests/cpu_isas.py as an independent check of the choice on this CPU. tests/test_recipe_customops.py checks that
the description lists every row of the C++ tables and that a fake family or ISA shows up in it."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bitnet_onnx import customops
from bitnet_onnx.ternary import pack_i2s
from cpu_isas import ALL_ISAS, attention_tiles_of_this_cpu, auto_runs_bf16, isas_of_this_cpu, oracle_pick

DISPATCH = customops.dispatch({})


def test_the_description_is_the_isa_table_the_library_lists():
    """bitnet_onnx_dispatch and bitnet_onnx_kernel_names read one table: the same records, in order."""
    assert [(r.name, r.built, r.runs, r.needs) for r in DISPATCH.isas] == [
        (k.name, k.built, k.runs, k.needs) for k in customops.library_kernels()]


def test_every_record_names_a_kernel_per_family_exactly_where_it_is_built():
    """The base family has a kernel on every built ISA and none elsewhere (its rows are the ISA table's); no
    family has one where the ISA is not built; every family has its scalar reference."""
    names = [family.name for family in DISPATCH.families]
    base = DISPATCH.base_family().name
    assert [family.order for family in DISPATCH.families] == list(range(len(names))) and names[0] == base
    for record in DISPATCH.isas:
        assert list(record.kernels) == names, record
        assert (record.kernels[base] is not None) == record.built, record
        assert record.built or all(kernel is None for kernel in record.kernels.values()), record
    assert all(DISPATCH.kernel("scalar", name) for name in names)


def test_the_base_family_kernels_carry_their_isa_names():
    """BITNET_ONNX_ISA's values name the base family's kernels (kernel_test --kernels takes both)."""
    base = DISPATCH.base_family().name
    assert all(record.kernels[base] == record.name for record in DISPATCH.isas if record.built)


@pytest.mark.parametrize("forced", ["", *ALL_ISAS, "avx9"])
def test_the_library_picks_what_the_cpu_flag_oracle_picks(forced):
    """For every value of BITNET_ONNX_ISA (unset, each record of the table, an unknown name) the library's pick
    is the oracle's (/proc/cpuinfo against tests/cpu_isas.py's declared flags); a refusal is the op's one line
    naming the variable, and what customops.selected_isa raises."""
    described = customops.dispatch({customops.ISA_ENV: forced})
    expected = oracle_pick(forced) if forced in ("", *ALL_ISAS) else None
    assert described.forced_isa.value == forced
    assert described.forced_isa.picks == expected, described.forced_isa
    assert described.default_isa == oracle_pick("")
    if expected is None:
        assert described.forced_isa.error.startswith(f"BITNET_ONNX_ISA={forced}: "), described.forced_isa
        assert "\n" not in described.forced_isa.error
        assert described.forced_family.picks is None  # no family is chosen for an ISA the op refuses
        with pytest.raises(customops.BitnetOnnxError) as refused:
            customops.selected_isa({customops.ISA_ENV: forced})
        assert str(refused.value) == described.forced_isa.error
    else:
        assert described.forced_isa.error == "" and customops.selected_isa({customops.ISA_ENV: forced}) == expected


def test_the_isas_the_library_runs_are_the_oracles():
    assert sorted(record.name for record in DISPATCH.running()) == sorted(isas_of_this_cpu())


def test_the_attention_tiles_it_lists_are_the_ones_this_cpu_has():
    """The float and bf16 tiles of the records this CPU runs are exactly the tile paths whose /proc/cpuinfo flags
    it has (no path hidden, none claimed); auto is bf16 exactly where the oracle's CPU classes say (AMX-BF16
    tiles anywhere, AVX512-BF16 on AMD Zen 4)."""
    running = DISPATCH.running()
    listed = {tiles for record in running for tiles in (record.attention.f32, record.attention.bf16) if tiles}
    assert listed == attention_tiles_of_this_cpu()
    for record in DISPATCH.isas:
        assert (record.attention.auto is not None) == record.runs, record
        # docs/attention.md, "Precision": auto runs bf16 only on tiles measured faster than f32 on this CPU class
        assert (record.attention.auto == "bf16") == (record.runs and auto_runs_bf16(record.attention.bf16)), record


def _i2s_session() -> ort.InferenceSession:
    k, n = 128, 32
    node = helper.make_node("I2STernaryMatMul", ["X", "W", "scale"], ["Y"], domain=customops.DOMAIN)
    graph = helper.make_graph([node], "i2s", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(pack_i2s(np.zeros((n, k), np.int8)), "W"),
                                           numpy_helper.from_array(np.array([0.5], np.float32), "scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(customops.DOMAIN, customops.DOMAIN_VERSION)])
    model.ir_version = 10
    return ort.InferenceSession(model.SerializeToString(), customops.session_options(threads=1),
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("isa", isas_of_this_cpu())
def test_a_forced_family_is_refused_exactly_where_the_op_refuses_it(isa, monkeypatch):
    """BITNET_ONNX_KERNEL on each ISA this CPU runs: the description picks each family where the ISA has its
    kernel and otherwise gives the error the op's session creation fails with; an unknown name is refused."""
    monkeypatch.setenv(customops.ISA_ENV, isa)
    for family in [*(f.name for f in DISPATCH.families), "measure", "rules", "nosuchfamily"]:
        monkeypatch.setenv(customops.KERNEL_ENV, family)
        choice = customops.dispatch().forced_family
        has_kernel = family in ("measure", "rules") or (family != "nosuchfamily" and DISPATCH.kernel(isa, family))
        assert choice.picks == (family if has_kernel else None), choice
        if has_kernel:
            assert choice.error == ""
            _i2s_session()
        else:
            assert choice.error.startswith(f"BITNET_ONNX_KERNEL={family}: ") and "\n" not in choice.error, choice
            with pytest.raises(Exception, match=re.escape(choice.error)):
                _i2s_session()
    monkeypatch.delenv(customops.KERNEL_ENV)
    assert customops.dispatch().forced_family == customops.ForcedChoice("", "measure", "")


@pytest.mark.parametrize("isa", isas_of_this_cpu())
@pytest.mark.parametrize("precision", ["", "f32", "bf16", "fp8"])
def test_the_attention_precision_is_what_the_auto_query_answers(isa, precision):
    """The description's auto precision under both variables is bitnet_onnx_attention_auto_precision's answer
    (or its error), and unforced it is the record's own auto."""
    environ = {customops.ISA_ENV: isa, customops.ATTENTION_PRECISION_ENV: precision}
    choice = customops.dispatch(environ).forced_attention_precision
    try:
        assert choice == customops.ForcedChoice(precision, customops.attention_auto_precision(environ), "")
    except customops.BitnetOnnxError as refused:
        assert choice == customops.ForcedChoice(precision, None, str(refused))
    if not precision:
        assert choice.picks == DISPATCH.isa(isa).attention.auto


def test_unknown_names_fail_by_name():
    with pytest.raises(customops.BitnetOnnxError, match="ISA 'avx9' is not in the library's ISA table"):
        DISPATCH.isa("avx9")
    with pytest.raises(customops.BitnetOnnxError, match="kernel family 'nosuch' is not in the library's family table"):
        DISPATCH.kernel("scalar", "nosuch")


def test_forced_values_are_quoted_as_json():
    """A forced value is the caller's environment: quotes, backslashes and control characters stay JSON."""
    value = 'a"b\\c\td\x01'
    described = customops.dispatch({customops.ISA_ENV: value, customops.KERNEL_ENV: value})
    assert described.forced_isa.value == value and described.forced_family.value == value
    assert described.forced_isa.error.startswith(f"BITNET_ONNX_ISA={value}: unknown kernel name")


def _documented_family(isa: str, m: int, n: int) -> str:
    """docs/op.md, "Kernel families": a family other than the base one costs ceil(M / block) * block * cost_percent
    by its first rule for the ISA with N >= min_n; the cheapest below 100 * M runs (the earlier on a tie), else the
    base family. The rules' numbers are the library's (its description); the inequality is the documented one."""
    best, best_cost = DISPATCH.base_family().name, 100 * m
    for family in DISPATCH.other_families():
        rule = next((r for r in family.rules if r.isa == isa and n >= r.min_n), None)
        if rule is None or DISPATCH.kernel(isa, family.name) is None:
            continue
        cost = -(-m // rule.block) * rule.block * rule.cost_percent
        if cost < best_cost:
            best, best_cost = family.name, cost
    return best


# Around the documented boundaries of the 16-token blocks at cost 80% and 90% (docs/op.md: at N >= 512, M = 1-12
# stay on multiply, 13-16 run lookup, ...; at N = 256-511, M 129 stays, every M from 130 runs lookup).
_TOKENS = [1, 12, 13, 16, 17, 25, 26, 51, 52, 57, 58, 129, 130, 512]
_ROWS = [128, 255, 256, 511, 512, 3072]


@pytest.mark.parametrize("isa", isas_of_this_cpu())
def test_the_family_a_shape_runs_follows_the_documented_rule(isa):
    """Under BITNET_ONNX_KERNEL=rules the family the driver picks per call (select_family), as the description
    states it for a shape, is the one docs/op.md's inequality gives with the library's rules, on every ISA this CPU
    runs; a forced family runs at every shape."""
    for n in _ROWS:
        for m in _TOKENS:
            shape = customops.dispatch({customops.ISA_ENV: isa, customops.KERNEL_ENV: "rules"}, shape=(m, 1024, n)).shape
            assert shape == customops.ShapeChoice(m, 1024, n, _documented_family(isa, m, n), "rules", ""), (isa, m, n)
    for family in DISPATCH.families:
        if DISPATCH.kernel(isa, family.name) is not None:
            environ = {customops.ISA_ENV: isa, customops.KERNEL_ENV: family.name}
            shape = customops.dispatch(environ, shape=(13, 640, 512)).shape
            assert (shape.runs, shape.by) == (family.name, "forced"), (isa, family.name)


def test_a_shape_the_op_refuses_or_a_refused_isa_runs_no_family():
    for bad in [(0, 128, 1), (1, 100, 1), (1, 0, 1), (1, 128, 0), (1, (1 << 24), 1)]:
        shape = customops.dispatch({}, shape=bad).shape
        assert shape.runs is None and shape.error.startswith(f"shape {','.join(map(str, bad))}: expected M,K,N"), shape
    assert customops.dispatch({customops.ISA_ENV: "avx9"}, shape=(16, 1024, 1024)).shape == customops.ShapeChoice(
        16, 1024, 1024, None, None, "")
    assert customops.dispatch({}).shape is None
