"""The pure C++ kernels (customops/kernels) without ONNX Runtime, against numpy reference vectors.

customops/tests/kernel_test.cc is built several ways and run on vectors from
tests/kernel_vectors/make_kernel_vectors.py (bitnet_onnx.ternary):
  native     Release, for scalar and every x86 kernel whose ISA this CPU has (/proc/cpuinfo), also
             through the driver at 1 and 2 threads (--threads);
  sanitize   AddressSanitizer + UBSan, aborting on the first report, same kernels;
  avxvnni-evex  the avxvnni kernel built with the EVEX encoding of its ymm vpdpbusd
             (-DBITNET_ONNX_AVXVNNI_AS_EVEX=ON), on CPUs with AVX512-VNNI but no AVX-VNNI;
  aarch64    cross-compiled (g++-aarch64-linux-gnu, static; also with UBSan) and run under
             qemu-aarch64 on each CPU model of the oracle (tests/cpu_isas.py QEMU_CPU_FLAGS: -cpu max
             has i8mm (SMMLA) and dotprod (SDOT), neoverse-n1 dotprod only, cortex-a72 neither), each
             kernel on the weakest model that runs it, as the aarch64 build's own dispatch description
             (dispatch_describe) says under that model; each run also checks the driver (quantize, thread
             tiling, epilogue) at 1 and 2 threads (the two largest files at 2: test_aarch64_qemu says why),
             on every vector file but those made for an x86-only path (index.txt's third column); the cheap
             runs' files include M = 15, 16, 17, 33 at N = 100, the job grid's edges.
Release builds also run kernel_test's --extreme-k cases (built in memory): int8 extremes against
+-1 weights at K around 2^19 (beyond which the one-token path of the int32-step x86 kernels used
to wrap) and at the op's largest K, 2^24 - 128, where the sums reach the int32 limit.
customops/tests/text_kernel_test.cc checks the text kernels (NFC, byte-fallback BPE) natively and
sanitized (own folder text-sanitize: libstdc++'s vector annotations too) on vectors from
tests/kernel_vectors/make_text_vectors.py (unicodedata; tokenizers with the factory's and the real Gemma3
tokenizer), then on seeded hostile texts and malformed tables.
The other kernel families (the rows of customops/kernels/i2s/families.h after mul: lut-scalar, lut-avx2,
lut-avx512, lut-neon; mul_direct-*; mixed-scalar, mixed-avx512vnni) run through the same kernel_test checks
plus its --generated cases (token-block / row / K-block tails, every M of 1..2048 around the block edges,
both models' shapes, all-extreme activations over 40 tokens and up to 8192 columns, zero rows): natively,
sanitized, and lut-neon under qemu-aarch64.
Builds are cached outside the checkout, in build_cache("kernel-tests")/<variant> (tests/build_cache.py:
through ccache, so a fresh clone compiles nothing again). A missing tool fails with what to install.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from build_cache import build_cache, ccache_cmake_args, ccache_env, via_checkout_link
from cpu_isas import ALL_ISAS, ISA_FLAGS, MIXED_GFNI_FLAGS, QEMU_CPU_FLAGS, cpu_flags, isas_of_this_cpu
from venvs import locked

from bitnet_onnx import customops

pytestmark = pytest.mark.slow  # the suite's tiers: tests/suite_marks.py

REPO = Path(__file__).resolve().parents[1]
TEST_SRC = REPO / "customops" / "tests"
# Python, so not under customops/: a .py there would be read as part of bitnet_onnx.customops by
# import-linter through the editable install (test_layers runs lint-imports as a user does)
VECTOR_SCRIPTS = Path(__file__).resolve().parent / "kernel_vectors"
BUILD_ROOT = build_cache("kernel-tests")
TOOLCHAIN = REPO / "scripts" / "aarch64-toolchain.cmake"
SANITIZE = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
APT_HINT = "apt-get install -y qemu-user g++-aarch64-linux-gnu (cmake and ninja: pip install cmake ninja)"

ON_X86 = platform.machine() in ("x86_64", "AMD64")


def _tool(name: str) -> str:
    """A build tool from the venv running pytest, else from PATH; missing is a failure."""
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if not found:
        pytest.fail(f"{name} not found: the kernel tests need it ({APT_HINT})")
    return found


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)


def _build(variant: str, *cmake_args: str, source: Path = TEST_SRC,
           targets: tuple[str, ...] = ("kernel_test",)) -> Path:
    """Configure (every time: kernel files may have appeared) and build `targets`; returns the build
    folder. Locked: another session (or xdist worker) may be building the same variant."""
    build = BUILD_ROOT / variant
    ninja = _tool("ninja")
    configure = [_tool("cmake"), "-S", str(via_checkout_link(source)), "-B", str(build), "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release", *ccache_cmake_args(), *cmake_args]
    with locked(BUILD_ROOT / f"{variant}.lock"):
        for cmd in (configure, [ninja, "-C", str(build), "-j2", *targets]):
            res = _run(cmd, env=ccache_env())
            assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return build


def _native_kernels() -> list[str]:
    """scalar plus every kernel of this build whose ISA this CPU has."""
    return isas_of_this_cpu()


def _check(res: subprocess.CompletedProcess, kernels: list[str]) -> str:
    out = res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert res.returncode == 0 and lines and lines[-1].endswith(" 0 failed"), f"kernel_test failed:\n{out[-6000:]}"
    for name in kernels:
        assert f"kernel {name}: ok" in res.stdout, out[-6000:]
    passed = int(lines[-1].split()[0])
    assert passed > 0, out
    return res.stdout


# Sanitized and emulated scalar runs skip the largest cases: they add nothing to memory-safety
# coverage and cost most of the time. NEON under qemu runs on every case.
SMALL_MACS = 300_000_000
# The scalar record's kernels under the emulated UBSan build take the files up to this many MACs (all the cheap
# files' kinds: every tile edge, M = 513, N = 1024, K = 3072, the extremes) and leave out the three largest cheap
# ones, whose emulated, sanitized scalar loops were 40 s of the run's 92: it is the C++ the native
# sanitizer runs check on every cheap file, and what emulation adds to it, aarch64's own type rules (a plain
# char is unsigned), every case reaches on the same lines.
EMULATED_SCALAR_MACS = 20_000_000


class VectorFile(NamedTuple):
    macs: int  # multiply-adds of its full dot
    cpus: str  # "any", or "x86": made for a path only the x86 kernels have (make_kernel_vectors.py)


@pytest.fixture(scope="module")
def vectors(tmp_path_factory) -> dict[str, VectorFile]:
    """Vector file -> its line of index.txt."""
    out = tmp_path_factory.mktemp("kernel-vectors")
    res = _run([sys.executable, str(VECTOR_SCRIPTS / "make_kernel_vectors.py"), str(out)], cwd=REPO)
    assert res.returncode == 0, res.stderr
    files = {str(out / name): VectorFile(int(macs), cpus) for name, macs, cpus in
             (line.split() for line in (out / "index.txt").read_text().splitlines())}
    assert len(files) >= 10 and max(v.macs for v in files.values()) > SMALL_MACS
    assert {v.cpus for v in files.values()} == {"any", "x86"}
    return files


def _small(vectors: dict[str, VectorFile]) -> list[str]:
    return [f for f, v in vectors.items() if v.macs <= SMALL_MACS]


def _for_aarch64(vectors: dict[str, VectorFile]) -> list[str]:
    return [f for f, v in vectors.items() if v.cpus == "any"]


# K for --extreme-k: 2^19 and 2^19 + 128 bracket the old one-token wrap (a row of -128 against +1
# weights) and where one token leaves that path for the few-token one (i2s_panel/x86_dot.h kSingleMaxK);
# 3 * 2^18 is well past it, and 2^24 - 128 is kMaxK of customops/kernels/i2s/driver.h.
MAX_K = (1 << 24) - 128
EXTREME_K = [1 << 19, (1 << 19) + 128, 3 << 18, MAX_K]


def _extreme(ks: list[int]) -> list[str]:
    return ["--extreme-k", ",".join(map(str, ks))]


def _check_extreme(res: subprocess.CompletedProcess, kernels: list[str], ks: list[int]) -> None:
    """Each kernel ran each extreme K and passed (dot; dot_scaled on the SIMD kernels)."""
    for name in kernels:
        for k in ks:
            assert f"{name} extreme K={k}: ok" in res.stdout, res.stdout[-6000:]


def test_kernel_list_is_the_library_table():
    """kernel_test links the ISA table (customops/kernels/isa.cc) itself: it lists what the op
    library exports, and the paths it says this CPU runs are exactly those /proc/cpuinfo has."""
    exe = _build("native") / "kernel_test"
    res = _run([str(exe), "--list-kernels"])
    assert res.returncode == 0, res.stderr
    rows = [line.split("\t") for line in res.stdout.splitlines()]
    assert all(len(row) == 4 for row in rows), res.stdout
    assert [row[0] for row in rows] == ALL_ISAS, res.stdout
    assert sorted(row[0] for row in rows if row[2] == "1") == sorted(isas_of_this_cpu()), res.stdout


def _check_driver(out: str, kernels: list[str], once: int | None = None) -> None:
    """The driver ran on every file with float inputs, at 1 and 2 threads (--threads 1,2; `once` of them at the
    last count only: --driver-once-above), and each ISA's driver with its family measured (the base family's
    kernels: the ISA's multiply kernel) on some of them."""
    for name in kernels:
        found = re.search(rf"^{name} driver: ([1-9]\d*) cases at 2 thread counts, (\d+) measured"
                          rf"(?:, (\d+) at the last count only)?: ok$", out, re.M)
        assert found, out[-3000:]
        base = name in {isa.name for isa in customops.dispatch({}).isas}  # the base family's kernels: their ISA's name
        assert (int(found[2]) > 0) == base, found[0]
        assert (None if found[3] is None else int(found[3])) == once, found[0]


def test_native(vectors):
    exe = _build("native") / "kernel_test"
    kernels = _native_kernels()
    res = _run([str(exe), "--kernels", ",".join(kernels), "--threads", "1,2", *_extreme(EXTREME_K), *vectors])
    _check_driver(_check(res, kernels), kernels)
    _check_extreme(res, kernels, EXTREME_K)


def family_kernels(dispatch: customops.Dispatch, isas: list[str]) -> list[str]:
    """The kernels every family but the base one has on `isas` (the library's description of its family rows:
    lut-avx512, lut-avx2, lut-scalar, ...; an ISA the description lacks fails by name)."""
    return sorted({kernel for isa in isas for family in dispatch.other_families()
                   if (kernel := dispatch.kernel(isa, family.name)) is not None})


def _family_kernels() -> list[str]:
    """Every kernel of the families beside mul (lut, mul_direct, mixed: families.h) of the ISAs this CPU runs."""
    return family_kernels(customops.dispatch({}), _native_kernels())


def test_family_kernels_native(vectors):
    """Every kernel of the other families on this CPU on every vector file, the --generated cases and the op's
    largest K."""
    exe = _build("native") / "kernel_test"
    kernels = _family_kernels()
    assert "lut-scalar" in kernels and (not ON_X86 or "lut-avx2" in kernels or "avx2" not in _native_kernels())
    res = _run([str(exe), "--kernels", ",".join(kernels), "--generated", "full", *_extreme([1 << 19, MAX_K]),
                *vectors])
    _check(res, kernels)
    _check_extreme(res, kernels, [1 << 19, MAX_K])


def test_family_kernels_sanitizers(vectors):
    exe = _build("sanitize", f"-DCMAKE_CXX_FLAGS={SANITIZE}", f"-DCMAKE_EXE_LINKER_FLAGS={SANITIZE}") / "kernel_test"
    kernels = _family_kernels()
    env = dict(os.environ, ASAN_OPTIONS="abort_on_error=0:detect_leaks=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    res = _run([str(exe), "--kernels", ",".join(kernels), "--generated", "small", *_small(vectors)], env=env)
    _check(res, kernels)
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr, res.stderr[-6000:]


def test_sanitizers(vectors):
    exe = _build("sanitize", f"-DCMAKE_CXX_FLAGS={SANITIZE}", f"-DCMAKE_EXE_LINKER_FLAGS={SANITIZE}") / "kernel_test"
    kernels = _native_kernels()
    env = dict(os.environ, ASAN_OPTIONS="abort_on_error=0:detect_leaks=1",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    res = _run([str(exe), "--kernels", ",".join(kernels), *_small(vectors)], env=env)
    _check(res, kernels)
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr, res.stderr[-6000:]


# AMD Zen 4/5 have AVX512-VNNI but no AVX-VNNI: the avxvnni kernel's code still runs there when
# built with the EVEX form of the same instruction (a test/benchmark-only build option). By the CPU-flag
# oracle (tests/cpu_isas.py).
AVXVNNI_BY_EVEX_ONLY = ON_X86 and "avx512vnni" in isas_of_this_cpu() and "avxvnni" not in isas_of_this_cpu()


@pytest.mark.skipif(not AVXVNNI_BY_EVEX_ONLY, reason="CPU runs avxvnni natively (test_native) or has no VNNI at all")
def test_avxvnni_code_as_evex(vectors):
    exe = _build("avxvnni-evex", "-DBITNET_ONNX_AVXVNNI_AS_EVEX=ON") / "kernel_test"
    res = _run([str(exe), "--kernels", "scalar,avxvnni", *_extreme(EXTREME_K), *vectors])
    _check(res, ["scalar", "avxvnni"])
    _check_extreme(res, ["scalar", "avxvnni"], EXTREME_K)
    env = dict(os.environ, UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    exe = _build("avxvnni-evex-sanitize", "-DBITNET_ONNX_AVXVNNI_AS_EVEX=ON", f"-DCMAKE_CXX_FLAGS={SANITIZE}",
                 f"-DCMAKE_EXE_LINKER_FLAGS={SANITIZE}") / "kernel_test"
    res = _run([str(exe), "--kernels", "avxvnni", *_small(vectors)], env=env)
    _check(res, ["avxvnni"])
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr, res.stderr[-6000:]


@pytest.mark.skipif(not ON_X86, reason="the panel kernels are the x86 multiply kernels")
def test_panel_profile_times_the_stages_of_the_library_kernel():
    """Each panel ISA's stage profiler (customops/tests/panel_profile.cc, run by benchmarks/panel_profile.py) on
    Gemma3-270M's 7 projections: it checks its kernel bit for bit against the library's (exit 1 otherwise),
    counts exactly one step per token, panel group and quad, unpacks the panel once per job row, reports the
    few-token path as such, and panel_profile.py tabulates what it prints; on a CPU without the ISA it says so
    (exit 3). avxvnni on Zen 4/5 from the EVEX build, as test_avxvnni_code_as_evex."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import panel_profile
    import stage_profiles

    builds = {"native": _build("native", targets=("panel_profiles",))}
    if AVXVNNI_BY_EVEX_ONLY:
        builds["avxvnni"] = _build("avxvnni-evex", "-DBITNET_ONNX_AVXVNNI_AS_EVEX=ON", targets=("panel_profiles",))
    isas = stage_profiles.panel_isas(builds["native"])
    assert {"avx2", "avx512vnni"} <= set(isas), isas
    shapes = [(k, n) for _, k, n in panel_profile.MODELS["gemma3"]]
    ms = [4, 16, 301]  # the direct path; the buffered one, one job row and two (tile_m = 256) with a token tail
    for isa in isas:
        exe = builds.get(isa, builds["native"]) / f"panel_profile_{isa}"
        header, cells, res = stage_profiles.run(exe, shapes, ms, reps=1, min_seconds=0.001, check=False)
        if isa not in _native_kernels() and not (isa == "avxvnni" and AVXVNNI_BY_EVEX_ONLY):
            assert res.returncode == panel_profile.NOT_RUN_HERE and "lacks" in res.stderr, res.stdout + res.stderr
            continue
        assert res.returncode == 0 and set(cells) == {(k, n, m) for k, n in shapes for m in ms}, res.stdout + res.stderr
        rows_per_group = int(header[0].split("rows_per_group=")[1])
        assert header[0].startswith(f"kernel {isa} ") and rows_per_group in (8, 16), header
        for (k, n, m), cell in cells.items():
            assert cell["full"] > 0 and cell["macs"] == m * k * -(-n // rows_per_group) * rows_per_group
            if m == 4:
                assert cell.get("direct") and cell["steps"] == 0 and "-steps" not in cell, (isa, k, n, m, cell)
                continue
            assert cell["steps"] * 4 * rows_per_group == cell["macs"], (isa, k, n, m, cell)
            assert cell["unpacked_over_codes"] == -(-m // 256), (isa, k, n, m, cell)
            assert all(cell[f"-{stage}"] > 0 for stage in panel_profile.STAGES) and 0 < cell["loops"] < cell["full"]
        table = panel_profile.table(isa, "gemma3", 100.0, cells, ms)
        assert len(table) == 3 and "direct path" in table[0], table
        assert all(row.startswith(f"| {isa} | gemma3 | {m} | ") and row.count("|") == 16 for row, m in zip(table[1:], ms[1:]))


@pytest.mark.skipif(not ON_X86 or "avx512vnni" not in isas_of_this_cpu(), reason="an AVX512-VNNI kernel")
def test_mixed_profile_times_the_stages_of_the_library_kernel():
    """Both builds of the co-issued kernel's stage profiler (customops/tests/mixed_profile.cc, run by
    benchmarks/mixed_profile.py) on Gemma3-270M's 7 projections: each checks its kernel bit for bit against the
    library's, which is the GFNI build on a CPU with GFNI (so the plain build's output is checked against it
    there) and says which build the library's dispatch runs (the GFNI one exactly where /proc/cpuinfo has GFNI),
    counts every multiply-add once over each token block's lanes (32, or 16 for a last block of <= 16)
    split 1:2 between vpdpbusd and lookup rows, and the 8 tables of a K block once per token block; the script
    tabulates what they print. The GFNI build exits 3 on a CPU without GFNI."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import mixed_profile
    import stage_profiles

    folder = _build("native", targets=("mixed_profiles",))
    has_gfni = MIXED_GFNI_FLAGS <= cpu_flags()
    shapes = [(k, n) for _, k, n in mixed_profile.MODELS["gemma3"]]
    ms = [16, 45, 301]  # one ymm block; a zmm block and a ymm tail; 9 zmm blocks and a ymm tail
    lanes = {16: 16, 45: 32 + 16, 301: 9 * 32 + 16}  # token lanes of the blocks
    for program, build in mixed_profile.BUILDS.items():
        header, cells, res = stage_profiles.run(folder / program, shapes, ms, reps=1, min_seconds=0.001, check=False)
        if build == "gfni" and not has_gfni:
            assert res.returncode == mixed_profile.NOT_RUN_HERE and "lacks" in res.stderr, res.stdout + res.stderr
            continue
        assert res.returncode == 0 and set(cells) == {(k, n, m) for k, n in shapes for m in ms}, res.stdout + res.stderr
        # the library's dispatch runs the GFNI build exactly where the /proc/cpuinfo oracle says the CPU has GFNI
        assert header[0] == (f"kernel mixed-avx512vnni gfni={int(build == 'gfni')} mul_rows=1 lut_rows=2 "
                             f"library_gfni={int(has_gfni)}"), header
        for (k, n, m), cell in cells.items():
            assert cell["mul_macs"] == lanes[m] * k * (n // 3), (build, k, n, m, cell)
            assert cell["mul_macs"] + cell["lookup_macs"] == lanes[m] * k * n, (build, k, n, m, cell)
            assert cell["table_entries"] == -(-m // 32) * (k // 32) * 8 * 81, (build, k, n, m, cell)
            assert cell["full"] > 0 and all(cell[f"-{stage}"] > 0 for stage in mixed_profile.STAGES)
            assert 0 < cell["loops"] < cell["full"], (build, k, n, m, cell)
        peaks = {"mixed-avx512vnni": 700.0, "avx512vnni": 470.0, "lut-avx512": 780.0}
        table = mixed_profile.table(build, "gemma3", peaks, cells, ms)
        assert len(table) == 3 and all(row.startswith(f"| {build} | gemma3 | {m} | ") for row, m in zip(table, ms))
        assert all(row.count("|") == 19 for row in table), table


@pytest.mark.skipif(not ON_X86 or "avx512vnni" not in isas_of_this_cpu(), reason="an AVX512-VNNI kernel")
def test_mixed_profile_splits_search_times_every_split_against_the_library():
    """The co-issued kernel's split search (mixed_profile.cc --splits, benchmarks/mixed_profile.py --splits) on
    Gemma3-270M's 7 projections, with the build the library runs on this CPU: the kernel's source instantiated at
    every other split, from every row on vpdpbusd (1:0) to every row on lookups (0:1), each checked bit for bit
    against the library's kernel (the program exits 1 otherwise) and timed whole beside the library's split
    ("full"); the script's table gives each split's time over the library's."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import mixed_profile
    import stage_profiles

    folder = _build("native", targets=("mixed_profiles",))
    program = "mixed_profile_gfni" if MIXED_GFNI_FLAGS <= cpu_flags() else "mixed_profile"
    shapes = [(k, n) for _, k, n in mixed_profile.MODELS["gemma3"]]
    ms = [16, 45, 301]  # one ymm block; a zmm block and a ymm tail; 9 zmm blocks and a ymm tail
    header, cells, res = stage_profiles.run(folder / program, shapes, ms, reps=1, min_seconds=0.001,
                                            mode=("--splits",))
    assert header[0].startswith("kernel mixed-avx512vnni ") and "mul_rows=1 lut_rows=2" in header[0], header
    splits = ["1:1", "1:3", "1:4", "2:1", "2:2", "2:3", "3:4", "1:0", "0:1"]  # kSplits but the library's 1:2
    assert set(cells) == {(k, n, m) for k, n in shapes for m in ms}, res.stdout
    assert mixed_profile.splits_of(cells) == [f"split_{s}" for s in splits]
    for cell in cells.values():
        assert cell["full"] > 0 and all(cell[f"split_{s}"] > 0 for s in splits), cell
        assert not any(f.startswith("-") for f in cell), cell  # the whole call only: no stage left out
    table = mixed_profile.split_table("gemma3", cells, ms)
    assert [row.split(" | ")[:2] for row in table] == [["| gemma3", str(m)] for m in ms], table
    assert all(row.count("|") == 4 + len(splits) for row in table), table



UBSAN = "-fsanitize=undefined -fno-sanitize-recover=all"  # ASan does not run under qemu-user


class Aarch64Build(NamedTuple):
    cmake_args: list[str]
    all_cases: bool  # every case but the x86-only ones, MAX_K too; else the cheap cases


AARCH64_BUILDS = {
    "aarch64": Aarch64Build(["-DCMAKE_EXE_LINKER_FLAGS=-static"], True),
    # the UBSan build runs every path once on the cheap cases (UB is the code's and the data's)
    "aarch64-ubsan": Aarch64Build([f"-DCMAKE_CXX_FLAGS={UBSAN}", f"-DCMAKE_EXE_LINKER_FLAGS={UBSAN} -static"], False),
}


@pytest.fixture(scope="module")
def aarch64_build():
    """variant -> the folder of its cross-compiled static kernel_test and dispatch_describe, built on first use."""
    _tool("aarch64-linux-gnu-g++")
    built: dict[str, Path] = {}

    def get(variant: str) -> Path:
        if variant not in built:
            built[variant] = _build(variant, f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", *AARCH64_BUILDS[variant].cmake_args,
                                    targets=("kernel_test", "dispatch_describe"))
        return built[variant]

    return get


def _oracle_runs(cpu: str) -> set[str]:
    """The ISAs a qemu CPU model runs by the declared oracle (tests/cpu_isas.py: its flags, each ISA's needs)."""
    return {"scalar"} | {isa for isa, need in ISA_FLAGS["aarch64"].items() if need <= QEMU_CPU_FLAGS[cpu]}


# The qemu CPU models, weakest first: the oracle's models form a chain, each running all the ISAs of the
# ones before it and more (cortex-a72 neither dotprod nor i8mm, neoverse-n1 dotprod, max both).
QEMU_CPUS = sorted(QEMU_CPU_FLAGS, key=lambda cpu: len(_oracle_runs(cpu)))
assert all(_oracle_runs(weaker) < _oracle_runs(stronger) for weaker, stronger in zip(QEMU_CPUS, QEMU_CPUS[1:])), QEMU_CPUS


def _qemu_dispatch(qemu: str, build: Path, cpu: str) -> customops.Dispatch:
    """The aarch64 build's dispatch description under qemu's `cpu` (dispatch_describe: what the op library would
    state there), its ISAs' `runs` checked against the oracle."""
    res = _run([qemu, "-cpu", cpu, str(build / "dispatch_describe")])
    assert res.returncode == 0, res.stderr[-3000:]
    described = customops.dispatch_from_text(res.stdout)
    assert {isa.name for isa in described.running()} == _oracle_runs(cpu), (cpu, res.stdout)
    return described


def running_kernels(described: customops.Dispatch) -> set[str]:
    """Every family's kernel on every ISA the description says runs."""
    return {kernel for isa in described.running() for family in described.families
            if (kernel := described.kernel(isa.name, family.name)) is not None}


# One kernel_test run per qemu CPU model and build, on the kernels that model is the weakest to run, as the
# aarch64 build's own dispatch says under it: so each kernel runs where the CPU has nothing more than it needs
# (the plain path on cortex-a72 holds no SDOT/SMMLA, the SDOT path on neoverse-n1 no SMMLA). The Release build
# runs every vector file / generated shape it lists (all: every case but those made for x86-only paths) with
# the int32 limit, and the driver at 1 and 2 threads (--threads); the scalar record's kernels, the same code
# as natively and the slowest emulated, run in the UBSan build's cheap cases only (EMULATED_SCALAR_MACS), in a
# run of their own. Each run also checks that
# the ISAs the CPU lacks are refused by name and that kernel_test's CPU line has what the oracle says.
# What keeps the emulated runs cheap without leaving a check out (issue 39; seconds of a cortex-a72 Release run
# on the loaded 2-vCPU machine, 110 s before):
# - the driver's expected y is the op's epilogue of the vector file's exact (numpy) sums wherever the file's dot
#   input is the driver's own quantized rows (make_kernel_vectors.py), no longer the scalar driver run under
#   emulation on every file in every run (12 s of each Release run, 4 s of each UBSan one); a numpy reference is
#   the stronger one, and the 3 files whose dot input is set apart (the int8 extremes) keep the scalar driver;
# - the two files above SMALL_MACS (M = 513, N = 1024, K = 3072 and 1024) run the driver at 2 threads only
#   (--driver-once-above; 7 s): the driver's job grid depends on M, N and the kernel's tiles, not on the thread
#   count, so their 2-thread run executes exactly the jobs of the 1-thread one, and the one thing the 1-thread
#   run adds, every job in order on one thread reusing its thread-local scratch, runs on the 22 other files,
#   among them grids of the same kinds (M = 513 at N = 256 and 7: a last one-token tile; N = 1024 at M = 64);
# - the lookup kernels run the int32 limit (MAX_K) as the one all-token tile (--extreme-whole-tile; lut-neon
#   30 of its 33 s): their sums of a token are one int16 lane of their own from the table build to the widening,
#   the same instructions whatever the call's token count, so the 16-token tile, which holds every row pattern,
#   checks each token's sums at the limit; the 3-token and one-token tiles are for the x86 multiply kernels'
#   one-token and direct paths, and the lookup kernels' token-count handling (the gather, the epilogue) is checked
#   at every count of a block by the --generated and file cases.
def _check_qemu_run(res: subprocess.CompletedProcess, cpu: str, kernels: list[str], files: list[str],
                    vectors: dict[str, VectorFile], all_cases: bool) -> None:
    """One emulated kernel_test run passed: every kernel on every case, the int32 limit where all cases run, the
    CPU line the oracle's, the driver on every file and its reference by the files' sums, no UBSan report."""
    out = _check(res, kernels)
    if all_cases:
        _check_extreme(res, kernels, [MAX_K])
    cpu_line = dict(field.split("=") for field in out.splitlines()[0].split()[1:])  # "cpu: avx2=0 ... i8mm=1"
    assert {isa: cpu_line[isa] == "1" for isa in ISA_FLAGS["aarch64"]} == \
        {isa: isa in _oracle_runs(cpu) for isa in ISA_FLAGS["aarch64"]}, out.splitlines()[0]
    _check_driver(out, kernels, once=sum(vectors[f].macs > SMALL_MACS for f in files))
    # every file by its numpy sums but the 3 whose dot input is set apart (extreme_k128, extreme_k3072, code3_extreme)
    reference = re.search(r"^driver reference: (\d+) cases by the files' sums, (\d+) by the scalar driver$", out, re.M)
    assert reference and int(reference[1]) + int(reference[2]) == len(files) and int(reference[2]) <= 3, out[-3000:]
    assert "runtime error" not in res.stderr, res.stderr[-6000:]


@pytest.mark.skipif(not ON_X86, reason="cross-compiles from x86-64; an aarch64 host runs NEON in test_native")
@pytest.mark.parametrize("cpu", QEMU_CPUS)
@pytest.mark.parametrize("variant", list(AARCH64_BUILDS))
@pytest.mark.qemu
def test_aarch64_qemu(vectors, aarch64_build, qemu_aarch64, variant, cpu):
    build, qemu, all_cases = aarch64_build(variant), qemu_aarch64, AARCH64_BUILDS[variant].all_cases
    described = _qemu_dispatch(qemu, build, cpu)
    weaker = QEMU_CPUS[:QEMU_CPUS.index(cpu)]
    own = running_kernels(described) - (running_kernels(_qemu_dispatch(qemu, build, weaker[-1])) if weaker else set())
    if all_cases:
        own -= set(described.isa("scalar").kernels.values())
    kernels = sorted(own)
    assert kernels, (variant, cpu)
    files = _for_aarch64(vectors) if all_cases else _small(vectors)
    lookup = sorted(set(kernels) & {described.kernel(isa.name, "lut") for isa in described.isas})
    extreme = []
    if all_cases:  # the int32 limit (emulated, K = 2^24 takes seconds), the lookup kernels on the whole tile (above)
        extreme = [*_extreme([MAX_K]), *(["--extreme-whole-tile", ",".join(lookup)] if lookup else [])]
    exe = build / "kernel_test"
    runs = [(kernels, files)]
    if not all_cases:  # the scalar record's kernels on the cheapest of the cheap files (EMULATED_SCALAR_MACS)
        scalar = set(described.isa("scalar").kernels.values())
        simd_kernels, scalar_kernels = [k for k in kernels if k not in scalar], [k for k in kernels if k in scalar]
        cheapest = [f for f in files if vectors[f].macs <= EMULATED_SCALAR_MACS]
        runs = [run for run in ((simd_kernels, files), (scalar_kernels, cheapest)) if run[0]]
    for group, group_files in runs:
        _check_qemu_run(_run([qemu, "-cpu", cpu, str(exe), "--kernels", ",".join(group), "--threads", "1,2",
                              "--driver-once-above", str(SMALL_MACS), "--generated", "full" if all_cases else "small",
                              *extreme, *group_files]),
                        cpu, group, group_files, vectors, all_cases)
    for isa in described.isas:
        if isa.built and not isa.runs:
            res = _run([qemu, "-cpu", cpu, str(exe), "--kernels", isa.name, _small(vectors)[0]])
            assert res.returncode != 0 and f"this CPU lacks {isa.name} (needs " in res.stdout, res.stdout[-3000:]


def _ort_headers() -> Path:
    """ORT headers as the op build found them: ONNXRUNTIME_INCLUDE_DIR, else the package build's copy."""
    env = os.environ.get("ONNXRUNTIME_INCLUDE_DIR")
    candidates = [Path(env)] if env else sorted(REPO.glob("build/*/.ort-headers/include"))
    for path in candidates:
        if (path / "onnxruntime_c_api.h").is_file():
            return via_checkout_link(path)
    pytest.fail("no ONNX Runtime headers: build the package first (scripts/setup.sh) or set ONNXRUNTIME_INCLUDE_DIR")


@pytest.mark.skipif(not ON_X86, reason="cross-compiles from x86-64")
def test_aarch64_op_library_builds():
    """The whole op library (ORT glue + kernels, NEON included) cross-compiles for aarch64 and
    exports only its six symbols. (No aarch64 onnxruntime here to load it.)"""
    _tool("aarch64-linux-gnu-g++")
    build = _build("aarch64-oplib", f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}",
                   f"-DONNXRUNTIME_INCLUDE_DIR={_ort_headers()}", source=REPO, targets=("all",))
    libs = sorted(build.rglob("*.so"))
    assert len(libs) == 1, libs
    res = _run([_tool("aarch64-linux-gnu-nm"), "-D", "--defined-only", str(libs[0])])
    assert res.returncode == 0, res.stderr
    symbols = {line.split()[-1] for line in res.stdout.splitlines() if line.strip()}
    assert symbols == {"RegisterCustomOps", "bitnet_onnx_kernel_names", "bitnet_onnx_op_names",
                       "bitnet_onnx_attention_auto_precision", "bitnet_onnx_attention_path",
                       "bitnet_onnx_dispatch"}, symbols
    res = _run([_tool("aarch64-linux-gnu-objdump"), "-d", str(libs[0])])
    assert "sdot" in res.stdout, "the SDOT kernel is missing from the aarch64 library"
    assert "smmla" in res.stdout, "the SMMLA (i8mm) kernel is missing from the aarch64 library"


def test_harness_refuses_missing_kernel_and_bad_file(vectors, tmp_path):
    """kernel_test itself never passes by skipping: unknown kernels and truncated files fail."""
    exe = _build("native") / "kernel_test"
    first = next(iter(vectors))
    missing = next(isa.name for isa in customops.dispatch({}).isas if not isa.built)  # the other machine's
    res = _run([str(exe), "--kernels", f"scalar,{missing}", first])
    assert res.returncode != 0 and f"FAIL select_kernel({missing})" in res.stdout, res.stdout
    truncated = tmp_path / "truncated.i2sv"
    truncated.write_bytes(Path(first).read_bytes()[:-1])
    res = _run([str(exe), "--kernels", "scalar", str(truncated)])
    assert res.returncode != 0 and "file size does not match" in res.stdout, res.stdout


# -- the text kernels (customops/kernels/text) -----------------------------------------------------
TEXT_SEED = 20260217  # fixed: every run sees the same hostile texts and table mutations
# libstdc++'s vector annotations on top: the kernels index vectors they reserve() ahead (a word's
# symbols, a segment's marks), where a read past size() is still inside the allocation. Their own
# build folder: the flag must be on in every file of a binary, and kernel_test's build stays as is.
TEXT_SANITIZE = SANITIZE + " -D_GLIBCXX_SANITIZE_VECTOR"
SANITIZER_ENV = dict(ASAN_OPTIONS="abort_on_error=0:detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")


@pytest.fixture(scope="module")
def text_vectors(tmp_path_factory) -> tuple[Path, list[str]]:
    """(folder of tables + vectors, names of its table sets)."""
    out = tmp_path_factory.mktemp("text-vectors")
    res = _run([sys.executable, str(VECTOR_SCRIPTS / "make_text_vectors.py"), str(out)], cwd=REPO)
    assert res.returncode == 0, res.stderr[-4000:]
    names = [line.split()[1] for line in (out / "index.txt").read_text().splitlines()]
    assert names == ["nfc-unicodedata", "bpe-factory-gemma3", "bpe-real-gemma3"], names
    return out, names


def _check_text(res: subprocess.CompletedProcess, names: list[str]) -> None:
    """Exit 0, the summary line, and every section of every table set ran and passed."""
    out = res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert res.returncode == 0 and lines and lines[-1].endswith(" 0 failed"), f"text_kernel_test failed:\n{out[-6000:]}"
    assert int(lines[-1].split()[0]) > 10_000, lines[-1]
    sections = [f"{name} {part}: ok" for name in names for part in ("vectors", "stress")]
    sections += ["nfc malformed tables: ok", "nfc mutated tables: ok",
                 "bpe-factory-gemma3 malformed tables: ok", "bpe-factory-gemma3 mutated tables: ok"]
    for section in sections:
        assert section in res.stdout, f"{section!r} missing:\n{out[-6000:]}"
    assert f"seed {TEXT_SEED}, 2000 texts + 10 of 1 MB" in res.stdout, res.stdout


def test_text_kernels_native(text_vectors):
    folder, names = text_vectors
    exe = _build("native", targets=("text_kernel_test",)) / "text_kernel_test"
    _check_text(_run([str(exe), "--seed", str(TEXT_SEED), str(folder)]), names)


def test_text_kernels_sanitizers(text_vectors):
    """Under ASan + UBSan (+ vector annotations), aborting at the first report: hostile texts and
    malformed tables never make the kernels read out of bounds."""
    folder, names = text_vectors
    exe = _build("text-sanitize", f"-DCMAKE_CXX_FLAGS={TEXT_SANITIZE}", f"-DCMAKE_EXE_LINKER_FLAGS={TEXT_SANITIZE}",
                 targets=("text_kernel_test",)) / "text_kernel_test"
    res = _run([str(exe), "--seed", str(TEXT_SEED), str(folder)], env=dict(os.environ, **SANITIZER_ENV))
    _check_text(res, names)
    assert "runtime error" not in res.stderr and "AddressSanitizer" not in res.stderr, res.stderr[-6000:]


def test_text_harness_refuses_bad_files(text_vectors, tmp_path):
    """text_kernel_test never passes on what it could not read: a truncated vectors file, a wrong
    expectation and an empty index fail."""
    folder, _ = text_vectors
    exe = _build("native", targets=("text_kernel_test",)) / "text_kernel_test"
    for suffix in (".tables", ".vectors"):
        shutil.copyfile(folder / f"nfc-unicodedata{suffix}", tmp_path / f"nfc-unicodedata{suffix}")
    (tmp_path / "index.txt").write_text("nfc nfc-unicodedata\n")
    vectors = tmp_path / "nfc-unicodedata.vectors"
    whole = vectors.read_bytes()
    vectors.write_bytes(whole[:-1])
    res = _run([str(exe), "--rounds", "10", str(tmp_path)])
    assert res.returncode != 0 and "the file is cut short" in res.stdout, res.stdout[-3000:]
    # One expected output made wrong (the last occurrence of the text: inputs come first).
    at = whole.rindex(b" leading space")
    vectors.write_bytes(whole[:at] + b" leading spacE" + whole[at + len(b" leading spacE"):])
    res = _run([str(exe), "--rounds", "10", str(tmp_path)])
    assert res.returncode != 0 and "FAIL nfc-unicodedata vector" in res.stdout, res.stdout[-3000:]
    (tmp_path / "index.txt").write_text("")
    res = _run([str(exe), str(tmp_path)])
    assert res.returncode != 0 and "no table sets listed" in res.stdout, res.stdout[-3000:]
