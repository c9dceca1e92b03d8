"""The EncoderAttention kernels (customops/kernels/attention) without ONNX Runtime, against the float64
reference in customops/tests/attention_kernel_test.cc: every tile-op path this CPU has, built plain
(Release) and with AddressSanitizer + UBSan. Builds: test_kernels_native's, attention-* (outside the
checkout: tests/build_cache.py)."""

from __future__ import annotations

import os

import pytest

from test_kernels_native import SANITIZE, _build, _run

from bitnet_onnx import customops

pytestmark = pytest.mark.slow  # the suite's tiers: tests/suite_marks.py


def _paths() -> list[str]:
    """Every attention tile path of the ISA records this CPU runs, as the library lists them (its dispatch
    description: scalar, avx2, avx512 and the AVX512-BF16 / AMX-BF16 tile ops where the CPU has them), the float
    ones also at precision bf16 on rounded operands (":bf16"). tests/test_dispatch.py holds the list to the
    CPU flag oracle (tests/cpu_isas.py)."""
    running = customops.dispatch({}).running()
    floats = list(dict.fromkeys(record.attention.f32 for record in running))
    bf16 = list(dict.fromkeys(record.attention.bf16 for record in running if record.attention.bf16))
    return floats + [f"{path}:bf16" for path in floats] + bf16


def _check(res, paths: list[str], min_cases: int = 100) -> None:
    out = res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert res.returncode == 0 and lines and lines[-1].endswith(" 0 failed"), out[-6000:]
    assert int(lines[-1].split()[0]) >= min_cases * len(paths), out[-6000:]
    for path in paths:
        assert f"path {path}: ok" in res.stdout, out[-6000:]


def test_native():
    exe = _build("attention-native", targets=("attention_kernel_test",)) / "attention_kernel_test"
    paths = _paths()
    _check(_run([str(exe), "--paths", ",".join(paths)]), paths)


def test_sanitizers():
    exe = _build("attention-sanitize", f"-DCMAKE_CXX_FLAGS={SANITIZE}", f"-DCMAKE_EXE_LINKER_FLAGS={SANITIZE}",
                 targets=("attention_kernel_test",)) / "attention_kernel_test"
    paths = _paths()
    env = dict(os.environ, ASAN_OPTIONS="abort_on_error=0:detect_leaks=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    # the largest references only cost time under ASan: S = 513 stays, with fewer heads
    res = _run([str(exe), "--paths", ",".join(paths), "--max-work", "3e8"], env=env)
    _check(res, paths, min_cases=120)
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr, res.stderr[-6000:]


def test_harness_refuses_unknown_path():
    """attention_kernel_test never passes by skipping: an unknown path fails."""
    exe = _build("attention-native", targets=("attention_kernel_test",)) / "attention_kernel_test"
    res = _run([str(exe), "--paths", "scalar,nonesuch"])
    assert res.returncode != 0 and "FAIL unknown path nonesuch" in res.stdout, res.stdout


def test_phase_timers_account_for_the_call():
    """attention_phases (the kernels built with driver.cc's phase timers, never the op library) prints one row
    per shape and length: the path the driver runs, the total and each phase's share, which sum to at most the
    total (the rest is "other": job set-up and the pool loop)."""
    exe = _build("attention-native", targets=("attention_phases",)) / "attention_phases"
    res = _run([str(exe), "--seq", "100,300", "--reps", "2", "--precision", "f32"])
    assert res.returncode == 0, res.stderr[-4000:]
    rows = [line for line in res.stdout.splitlines() if line.startswith("| ") and line[2].isalpha()][1:]
    assert [row.split(" | ")[0:2] for row in rows] == [[f"| {s}", n] for s in ("qwen3", "gemma3-sliding", "gemma3-full")
                                                       for n in ("100", "300")], res.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("| \n").split("|")]
        total, phases = float(cells[3]), [float(c.split()[0]) for c in cells[4:]]
        assert len(phases) == 8 and total > 0 and all(p >= 0 for p in phases[:-1]), row
        assert abs(sum(phases) - total) <= 0.02 * total + 0.02, row  # "other" closes the sum
    bad = _run([str(exe), "--precision", "fp8"])
    assert bad.returncode == 2 and "--precision f32 or bf16" in bad.stderr
