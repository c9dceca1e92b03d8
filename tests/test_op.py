"""I2STernaryMatMul through onnxruntime: every kernel this CPU has vs the numpy reference.

Each ISA path is forced with BITNET_ONNX_ISA (read when a session creates the op's kernel). The
reference is bitnet_onnx.ternary.i2s_matmul_reference; integer sums must match exactly and
outputs to 1e-5 relative.
"""

from __future__ import annotations

import shutil
import subprocess
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bitnet_onnx import customops
from bitnet_onnx.customops import DOMAIN as OP_DOMAIN
from bitnet_onnx.customops.i2s_matmul import NAME as OP_NAME
from bitnet_onnx.ternary import i2s_integer_sums, i2s_matmul_reference, pack_i2s, quantize_activations, rms_norm_f32
from cpu_isas import ALL_ISAS, isas_of_this_cpu

EPS = float(np.float32(1e-6))  # the attribute is a float32; the reference gets the same value

ISAS = isas_of_this_cpu()
MISSING_ISAS = [isa for isa in ALL_ISAS if isa not in ISAS]


# ---------------------------------------------------------------------------------------------
# Model building


def make_model(k, n, w=None, scale=0.03, norm=None, w_const=True, norm_const=True, x_rank=2, eps=None,
               norm_dtype=TensorProto.FLOAT, x_dims=None, w_dims=("N", "KB")):
    """One I2STernaryMatMul node. W/norm are initializers when *_const, else graph inputs."""
    if x_dims is None:
        x_dims = [f"d{i}" for i in range(x_rank - 1)] + [k]
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_dims)]
    inits = [numpy_helper.from_array(np.asarray(scale, dtype=np.float32).reshape(-1), "scale")]
    node_inputs = ["X", "W", "scale"]
    if w_const:
        inits.append(numpy_helper.from_array(w, "W"))
    else:
        inputs.append(helper.make_tensor_value_info("W", TensorProto.UINT8, w_dims))
    if norm is not None:
        node_inputs.append("norm_weight")
        if norm_const:
            inits.append(numpy_helper.from_array(norm, "norm_weight"))
        else:
            inputs.append(helper.make_tensor_value_info("norm_weight", norm_dtype, ["K"]))
    attrs = {} if eps is None else {"epsilon": eps}
    node = helper.make_node(OP_NAME, node_inputs, ["Y"], domain=OP_DOMAIN, name="proj", **attrs)
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "i2s", inputs, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(OP_DOMAIN, 1)])
    model.ir_version = 8
    return model.SerializeToString()


def session(model: bytes, isa: str | None, monkeypatch, threads: int = 1) -> ort.InferenceSession:
    if isa is None:
        monkeypatch.delenv(customops.ISA_ENV, raising=False)
    else:
        monkeypatch.setenv(customops.ISA_ENV, isa)
    return ort.InferenceSession(model, customops.session_options(threads), providers=["CPUExecutionProvider"])


def random_case(rng, k, n, x_shape, norm, random_bytes=False):
    """X with varied row scales, ternary W (or arbitrary bytes: code 0b11 must read as 0)."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    if x.size:
        rows = x.reshape(-1, k)
        rows *= rng.choice([1e-3, 1.0, 50.0], size=(rows.shape[0], 1)).astype(np.float32)
        rows[:, rng.integers(0, k)] *= 8  # an outlier per row
    if random_bytes:
        w = rng.integers(0, 256, size=(n, k // 4), dtype=np.uint8)
    else:
        w = pack_i2s(rng.choice(np.array([-1, 0, 1], dtype=np.int8), size=(n, k), p=[0.3, 0.4, 0.3]))
    scale = np.float32(rng.uniform(0.01, 0.05))
    nw = None
    if norm is not None:
        nw = rng.uniform(0.5, 1.5, size=k).astype(norm)
    return x, w, scale, nw


def assert_matches_reference(y, x, w, scale, nw, eps=EPS):
    """Integer sums identical (recovered from y), outputs within 1e-5 relative."""
    ref = i2s_matmul_reference(x, w, scale, nw, eps=eps)
    assert y.shape == ref.shape and y.dtype == np.float32
    if y.size == 0:
        return
    xn = rms_norm_f32(x, nw, eps) if nw is not None else x
    q, a, _ = quantize_activations(xn)
    sums = i2s_integer_sums(q, w)
    finite = np.isfinite(a)
    recovered = np.rint(y.astype(np.float64) * a[..., None] / np.float64(scale))
    np.testing.assert_array_equal(recovered[finite], sums[finite])
    tol = 1e-5 * max(float(np.nanmax(np.abs(ref))), 1e-30)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=tol)


# ---------------------------------------------------------------------------------------------
# Correctness on every ISA path: together the cases cover every K, N, M, X rank and norm type,
# constant W and W fed at run time.

# (K, N, X shape (M = product of all but the last), norm dtype, W constant, W arbitrary bytes)
CASES = [
    (128, 1, (128,), None, True, False),
    (128, 7, (0, 128), np.float32, False, False),
    (128, 256, (3, 128), None, True, True),
    (128, 1024, (513, 128), np.float32, False, False),  # several token tiles x output tiles
    (640, 256, (3, 171, 640), np.float16, True, False),  # M = 513
    (640, 1, (513, 640), None, False, True),
    (1024, 1024, (64, 1024), np.float32, True, False),
    (1024, 7, (1, 3, 1024), None, True, False),
    (2048, 256, (3, 2048), np.float16, False, False),
    (2048, 1024, (2048,), None, True, False),
    (3072, 1024, (2, 0, 3072), np.float32, True, False),
    (3072, 256, (1, 64, 3072), None, False, False),
    (3072, 7, (1, 3072), np.float16, True, True),
]


def case_id(c):
    k, n, shape, norm, w_const, rnd = c
    nm = {None: "nonorm", np.float32: "f32norm", np.float16: "f16norm"}[norm]
    return f"K{k}-N{n}-X{'x'.join(map(str, shape))}-{nm}-{'Wconst' if w_const else 'Winput'}{'-anybytes' if rnd else ''}"


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_op_matches_reference(isa, case, monkeypatch):
    k, n, shape, norm, w_const, random_bytes = case
    rng = np.random.default_rng(k * 7 + n)
    x, w, scale, nw = random_case(rng, k, n, shape, norm, random_bytes)
    model = make_model(k, n, w, scale, nw, w_const=w_const, x_rank=len(shape))
    feeds = {"X": x} if w_const else {"X": x, "W": w}
    y = session(model, isa, monkeypatch).run(None, feeds)[0]
    assert_matches_reference(y, x, w, scale, nw)


@pytest.mark.parametrize("isa", ISAS)
def test_norm_weight_fed_at_run_time(isa, monkeypatch):
    rng = np.random.default_rng(5)
    for dtype, proto in [(np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16)]:
        x, w, scale, nw = random_case(rng, 640, 7, (5, 640), dtype)
        model = make_model(640, 7, w, scale, nw, norm_const=False, norm_dtype=proto, eps=1e-5)
        y = session(model, isa, monkeypatch).run(None, {"X": x, "norm_weight": nw})[0]
        assert_matches_reference(y, x, w, scale, nw, eps=float(np.float32(1e-5)))


@pytest.mark.parametrize("isa", ISAS)
def test_ties_round_half_to_even(isa, monkeypatch):
    # absmax 127 -> a = 1 exactly, so x * a hits .5 ties: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2.
    k, n = 128, 3
    x = np.zeros((2, k), dtype=np.float32)
    x[0, :6] = [127.0, 0.5, 1.5, -2.5, 3.5, -0.5]
    x[1, :4] = [-127.0, 2.5, -1.5, 126.5]
    t = np.zeros((n, k), dtype=np.int8)
    t[0, 1:6] = 1  # 0 + 2 - 2 + 4 + 0 = 4
    t[1, 0] = 1  # picks x[., 0]
    t[2, 1:4] = -1
    w = pack_i2s(t)
    y = session(make_model(k, n, w, 1.0), isa, monkeypatch).run(None, {"X": x})[0]
    np.testing.assert_array_equal(y, [[4.0, 127.0, -(0 + 2 - 2)], [2.0 - 2.0 + 126.0, -127.0, -(2 - 2 + 126)]])
    assert_matches_reference(y, x, w, 1.0, None)


@pytest.mark.parametrize("isa", ISAS)
def test_non_finite_rows_give_nan_rows_only(isa, monkeypatch):
    rng = np.random.default_rng(11)
    for norm in (None, np.float32):
        x, w, scale, nw = random_case(rng, 256, 64, (6, 256), norm)
        x[1, 3] = np.nan
        x[3, 200] = np.inf
        x[4, 0] = -np.inf
        y = session(make_model(256, 64, w, scale, nw), isa, monkeypatch).run(None, {"X": x})[0]
        bad = [1, 3, 4]
        assert np.isnan(y[bad]).all()
        good = [0, 2, 5]
        assert np.isfinite(y[good]).all()
        assert_matches_reference(y[good], x[good], w, scale, nw)


def test_scalar_scale_is_accepted(monkeypatch):
    rng = np.random.default_rng(9)
    x, w, _, _ = random_case(rng, 128, 7, (2, 128), None)
    model = onnx.load_from_string(make_model(128, 7, w, 0.25))
    next(i for i in model.graph.initializer if i.name == "scale").dims[:] = []  # shape [] instead of [1]
    y = session(model.SerializeToString(), None, monkeypatch).run(None, {"X": x})[0]
    assert_matches_reference(y, x, w, 0.25, None)


# ---------------------------------------------------------------------------------------------
# Large K: the largest sums each kernel path makes. Rows of +-1 quantize to q = +-127 (a = 127),
# so against rows of +-1 weights the sums reach +-127 * K. The one-token path of the int32-step
# kernels (avx512vnni, avxvnni, and amx's token tails) kept them exact up to K = 2^19 + 4096; from
# 2^19 + 4224 on, the sum of its top code field wrapped (it now serves K <= 2^19 only). 2^24 - 128
# is the op's largest K (the sums' int32 limit). customops/tests/kernel_test.cc --extreme-k adds
# q = -128 and every x86 ISA.

LARGE_K = [1 << 19, (1 << 19) + 4224, 3 << 18, (1 << 24) - 128]

# Column c mod 16: constant, alternating, and the top code field (c % 16 >= 12, the 2-bit field
# the one-token path scales by 64) against the rest.
_TOP = np.arange(16) >= 12
X_PATTERNS = [np.ones(16), -np.ones(16), np.resize([1, -1], 16), np.resize([-1, 1], 16), np.where(_TOP, -1, 1)]
T_PATTERNS = [np.ones(16), -np.ones(16), np.resize([1, -1], 16), np.where(_TOP, 1, -1)]


def _block_rows(patterns: list, count: int) -> np.ndarray:
    """count rows of one 128-column block, cycling through the 16-periodic patterns."""
    return np.stack([np.tile(patterns[i % len(patterns)], 8) for i in range(count)])


@pytest.mark.parametrize("k", LARGE_K)
def test_large_k_extreme_sums_match_reference_on_every_isa(k, monkeypatch):
    # One 128-column block repeated: I2_S packs each block on its own, so W is its bytes tiled.
    w = np.tile(pack_i2s(_block_rows(T_PATTERNS, len(T_PATTERNS)).astype(np.int8)), (1, k // 128))
    # 1 token: the one-token path (beyond 2^19, the few-token path with one token); 2 and 5: the
    # few-token paths (5 = 4 + a one-token tail on avx512vnni); 16: the many-token paths. At 2^24,
    # 2 tokens keep X within 128 MB.
    counts = (1, 2) if k > 3 << 18 else (1, 5, 16)
    x = np.tile(_block_rows(X_PATTERNS, max(counts)).astype(np.float32), (1, k // 128))
    # The reference one (token, W row) pair at a time: rows are independent, and at K = 2^24 its
    # float and int32 temporaries of all of X and T would take gigabytes.
    ref = np.array([[i2s_matmul_reference(x[i:i + 1], w[j:j + 1], 1.0)[0, 0] for j in range(len(w))]
                    for i in range(max(counts))])
    assert np.abs(ref[0]).max() == k  # the top sum, 127 * K, is there (y = sum / a, a = 127)
    model = make_model(k, len(w), w, 1.0)
    for isa in ISAS:
        sess = session(model, isa, monkeypatch)
        for m in counts:
            np.testing.assert_array_equal(sess.run(None, {"X": x[:m]})[0], ref[:m], err_msg=f"{isa}, M = {m}")
        del sess  # one session's repacked W at a time


# ---------------------------------------------------------------------------------------------
# Threads


def test_one_and_two_threads_give_identical_results(monkeypatch):
    rng = np.random.default_rng(3)
    x, w, scale, nw = random_case(rng, 640, 1024, (300, 640), np.float32)
    model = make_model(640, 1024, w, scale, nw)
    for isa in (None, "scalar"):
        y1 = session(model, isa, monkeypatch, threads=1).run(None, {"X": x})[0]
        y2 = session(model, isa, monkeypatch, threads=2).run(None, {"X": x})[0]
        np.testing.assert_array_equal(y1, y2)
        assert_matches_reference(y1, x, w, scale, nw)


def test_two_python_threads_share_one_session(monkeypatch):
    rng = np.random.default_rng(4)
    _, w, scale, nw = random_case(rng, 1024, 256, (1, 1024), np.float16)
    sess = session(make_model(1024, 256, w, scale, nw), None, monkeypatch, threads=2)
    xs = [random_case(rng, 1024, 256, (m, 1024), None)[0] for m in (97, 130)]
    results: dict[int, list] = {0: [], 1: []}
    errors: list[BaseException] = []

    def work(i):
        try:
            for _ in range(4):
                results[i].append(sess.run(None, {"X": xs[i]})[0])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in (0, 1):
        assert len(results[i]) == 4
        for y in results[i]:
            assert_matches_reference(y, xs[i], w, scale, nw)


# ---------------------------------------------------------------------------------------------
# Kernel selection


def test_default_kernel_runs(monkeypatch):
    rng = np.random.default_rng(8)
    x, w, scale, _ = random_case(rng, 128, 7, (2, 128), None)
    y = session(make_model(128, 7, w, scale), None, monkeypatch).run(None, {"X": x})[0]
    assert_matches_reference(y, x, w, scale, None)


@pytest.mark.parametrize("isa", MISSING_ISAS + ["sse9"])
def test_forcing_an_isa_this_cpu_lacks_is_a_clear_error(isa, monkeypatch):
    w = pack_i2s(np.zeros((1, 128), dtype=np.int8))
    with pytest.raises(Exception, match=rf"BITNET_ONNX_ISA={isa}: (this CPU lacks {isa}|unknown kernel name)"):
        session(make_model(128, 1, w), isa, monkeypatch)


# ---------------------------------------------------------------------------------------------
# Bad inputs: an ORT error whose message names the input and the problem (at session creation
# for bad initializers, at run time for bad feeds), never a crash or an out-of-bounds read.

W128 = pack_i2s(np.ones((2, 128), dtype=np.int8))
X128 = np.ones((3, 128), dtype=np.float32)


def expect_error(monkeypatch, pattern, model, feeds=None):
    with pytest.raises(Exception, match=pattern) as info:
        session(model, "scalar", monkeypatch).run(None, feeds or {"X": X128})
    assert "I2STernaryMatMul node 'proj'" in str(info.value)


def test_error_k_not_a_multiple_of_128(monkeypatch):
    w = np.zeros((2, 25), dtype=np.uint8)
    x = np.ones((3, 100), dtype=np.float32)
    expect_error(monkeypatch, r"input 'X' last dimension: K = 100 must be a positive multiple of 128",
                 make_model(100, 2, w_const=False), {"X": x, "W": w})
    expect_error(monkeypatch, r"input 'W' \(4 x bytes per row\): K = 80 must be a positive multiple of 128",
                 make_model(80, 2, np.zeros((2, 20), dtype=np.uint8)), {"X": np.ones((1, 80), np.float32)})


def test_error_w_bytes_do_not_match_k(monkeypatch):
    w = np.zeros((2, 16), dtype=np.uint8)
    expect_error(monkeypatch, r"input 'W' has 16 bytes per row \(shape \[2, 16\]\), expected K/4 = 32 for K = 128",
                 make_model(128, 2, w_const=False), {"X": X128, "W": w})
    w256 = pack_i2s(np.ones((2, 256), dtype=np.int8))
    expect_error(monkeypatch, r"input 'W' is for K = 256 but input 'X' has K = 128", make_model(128, 2, w256))


def test_error_w_not_2d(monkeypatch):
    model = make_model(128, 2, w_const=False, w_dims=None)
    expect_error(monkeypatch, r"input 'W' must be 2-D \[N, K/4\] uint8, got shape \[64\]", model,
                 {"X": X128, "W": np.zeros(64, dtype=np.uint8)})
    expect_error(monkeypatch, r"input 'W' must be 2-D", make_model(128, 2, np.zeros((1, 2, 32), dtype=np.uint8)))


def test_error_scale_shape(monkeypatch):
    expect_error(monkeypatch, r"input 'scale' must hold one float32 of shape \[1\], got shape \[2\]",
                 make_model(128, 2, W128, scale=[0.1, 0.2]))


def test_error_norm_weight_length_and_type(monkeypatch):
    expect_error(monkeypatch, r"input 'norm_weight' has length 64 but input 'X' has K = 128",
                 make_model(128, 2, W128, norm=np.ones(64, dtype=np.float32)))
    model = make_model(128, 2, W128, norm=np.ones(64, dtype=np.float32), norm_const=False)
    expect_error(monkeypatch, r"input 'norm_weight' must have shape \[K\] = \[128\], got \[64\]", model,
                 {"X": X128, "norm_weight": np.ones(64, dtype=np.float32)})
    model = make_model(128, 2, W128, norm=np.ones(128), norm_const=False, norm_dtype=TensorProto.DOUBLE)
    expect_error(monkeypatch, r"input 'norm_weight' must be float32 or float16", model,
                 {"X": X128, "norm_weight": np.ones(128, dtype=np.float64)})
    expect_error(monkeypatch, r"input 'norm_weight' must be 1-D \[K\], got shape \[1, 128\]",
                 make_model(128, 2, W128, norm=np.ones((1, 128), dtype=np.float32)))


def test_error_x_scalar(monkeypatch):
    expect_error(monkeypatch, r"input 'X' must have rank >= 1", make_model(128, 2, W128, x_dims=[]),
                 {"X": np.array(1.0, dtype=np.float32)})


def test_error_epsilon(monkeypatch):
    expect_error(monkeypatch, r"attribute 'epsilon' must be a finite float >= 0",
                 make_model(128, 2, W128, eps=-1.0))


# ---------------------------------------------------------------------------------------------
# The shared library


def test_library_kernel_table():
    """The library's ISA table: scalar last and always run, every name the CPU runs is built, and
    the ones it says this CPU runs are those /proc/cpuinfo has (no path hidden, none claimed)."""
    table = customops.library_kernels()
    assert table[-1] == customops.KernelIsa("scalar", True, True, "")
    assert len({isa.name for isa in table}) == len(table)
    assert all(isa.built for isa in table if isa.runs)
    assert all(isa.needs for isa in table if isa.name != "scalar")
    assert sorted(isa.name for isa in table if isa.runs) == sorted(ISAS)


def test_selected_isa_follows_the_library_rule():
    """What bench headers name: the best ISA this CPU runs, or the one BITNET_ONNX_ISA forces; a name
    the library does not run is the op's own line naming the variable."""
    assert customops.selected_isa({}) == ISAS[-1]  # ISAS: best last
    assert customops.selected_isa({customops.ISA_ENV: ""}) == ISAS[-1]
    assert [customops.selected_isa({customops.ISA_ENV: isa}) for isa in ISAS] == ISAS
    for bad in ("avx9", *(isa.name for isa in customops.library_kernels() if not isa.runs)):
        refusal = f"^BITNET_ONNX_ISA={bad}: (unknown kernel name|this CPU lacks {bad})"
        with pytest.raises(customops.BitnetOnnxError, match=refusal):
            customops.selected_isa({customops.ISA_ENV: bad})


def test_library_exports_only_its_six_symbols_and_does_not_link_onnxruntime():
    lib = customops.library_path()
    assert shutil.which("nm") and shutil.which("readelf"), "binutils (which built the library) is needed"
    defined = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    symbols = sorted(line.split()[-1] for line in defined.splitlines() if line.strip())
    assert symbols == ["RegisterCustomOps", "bitnet_onnx_attention_auto_precision", "bitnet_onnx_attention_path",
                       "bitnet_onnx_dispatch", "bitnet_onnx_kernel_names", "bitnet_onnx_op_names"]
    dynamic = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True, check=True).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed and not any("onnxruntime" in line or "libstdc++" in line for line in needed), needed


def test_library_lists_the_ops_python_has_schemas_for():
    domain, names = customops.library_ops()
    assert domain == customops.DOMAIN
    assert sorted(names) == sorted(customops.SCHEMAS)


def test_library_path_override(monkeypatch, tmp_path):
    copy = tmp_path / "custom_ops.so"
    shutil.copyfile(customops.library_path(), copy)
    monkeypatch.setenv(customops.LIBRARY_ENV, str(copy))
    assert customops.library_path() == str(copy.resolve())
    w = pack_i2s(np.ones((2, 128), dtype=np.int8))
    y = session(make_model(128, 2, w, 1.0), None, monkeypatch).run(None, {"X": np.ones((1, 128), np.float32)})[0]
    np.testing.assert_array_equal(y, [[128.0, 128.0]])
    monkeypatch.setenv(customops.LIBRARY_ENV, str(tmp_path / "missing.so"))
    with pytest.raises(customops.BitnetOnnxError, match="BITNET_ONNX_LIBRARY=.*missing.so: no such file"):
        customops.library_path()


# ---------------------------------------------------------------------------------------------
# ONNX schema


def test_onnx_checker_and_shape_inference_accept_the_op():
    customops.register_onnx_schema()
    customops.register_onnx_schema()  # idempotent
    k, n = 256, 48
    w = pack_i2s(np.zeros((n, k), dtype=np.int8))
    model = onnx.load_from_string(make_model(k, n, w, norm=np.ones(k, dtype=np.float16), x_rank=3))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["d0", "d1", n]))
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    model.graph.output[0].type.tensor_type.ClearField("shape")
    out = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.output[0]
    dims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
    assert dims == ["d0", "d1", n]
    assert inferred.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_onnx_shape_inference_rejects_mismatched_w():
    customops.register_onnx_schema()
    w = pack_i2s(np.zeros((4, 256), dtype=np.int8))  # K = 256, X says 128
    model = onnx.load_from_string(make_model(128, 4, w))
    with pytest.raises(onnx.shape_inference.InferenceError, match="'W' has 64 bytes per row"):
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
