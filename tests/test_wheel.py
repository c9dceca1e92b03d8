"""The manylinux_2_28 wheels of scripts/build_wheels.sh, installed and run as a user without a compiler would.

The session builds the sdist and both wheels once (scripts/build_wheels.sh; its tools venv and CMake
build folders, kept outside the checkout in the tests' cache (tests/build_cache.py), make a re-run
incremental, from any checkout) into build_cache("wheel-test-dist"), then:
  (3) each wheel: auditwheel's verdict is manylinux_2_28 or older; its library is for the wheel's
      architecture, needs no glibc symbol version newer than GLIBC_2.28, links nothing but glibc
      (libc, libm, libpthread, libdl, the loader) and exports exactly customops/ort/exports.map's
      entry points; every ISA path is in it (x86-64: AMX, AVX-512 VNNI, AVX-VNNI, AVX2; aarch64:
      plain NEON, SDOT (dotprod) and SMMLA (i8mm) paths);
  (1) a fresh venv with only the x86-64 wheel and its PyPI dependencies, run with nothing but the
      venv on PATH (so no compiler): the wheel's library (Zig's clang) gives the same output bits
      as this checkout's (the system compiler) on the op tests' I2STernaryMatMul and
      EncoderAttention cases, on every ISA path of this CPU; one export + `embed` + `Embedder`, and
      the C example (built with the system compiler by this process) on the wheel's library;
  (2) the aarch64 library in the real aarch64 ONNX Runtime (the aarch64 onnxruntime wheel's
      libonnxruntime.so, `pip download --platform manylinux_2_28_aarch64`), through the C example
      cross-built for aarch64 and run under qemu-aarch64 on three CPU models, each forced to its best
      path (max: i8mm, neoverse-n1: dotprod, cortex-a72: plain NEON): its embeddings of an i2s
      export of every architecture equal the x86-64 wheel's (cosine >= 0.9999999).
Needs what scripts/setup.sh --test installs (qemu-user, g++-aarch64-linux-gnu) and network access
to PyPI and Debian (the build tools, the ORT headers, the fresh venv's dependencies).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

import test_attention_op as attention_op
import test_op as i2s_op
from build_cache import build_cache, ccache_cmake_args, ccache_env, shared_cache, via_checkout_link
from cpu_isas import ALL_ISAS, ISA_FLAGS, QEMU_CPU_FLAGS, best_isa_of
from suite_marks import tier_fixture
from venvs import isolated_env as _fresh_env  # a user who installed only the wheel
from venvs import locked
from venvs import run as _run
from venvs import run_ok as _ok

from bitnet_onnx import customops
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.runtime.tokenization import TextTokenizer

REPO = Path(__file__).resolve().parents[1]
# build_wheels.sh's BITNET_WHEEL_WORK: its tools venv (ziglang & co.: minutes to install), CMake build
# folders and ORT headers. One for every checkout: the script builds from the sdist unpacked at a fixed
# place in it and synced by content, so the build folders never see which checkout made the sdist, and
# a checkout's changes recompile only what they changed. A lock serializes the sessions running the script.
WORK = Path(os.environ.get("BITNET_WHEEL_WORK") or shared_cache("build-wheels-work"))
DIST = build_cache("wheel-test-dist")  # not dist/: the tests never touch what a user built there
ORT_AARCH64 = shared_cache("onnxruntime-aarch64")  # the downloaded aarch64 onnxruntime wheel, kept
EXAMPLES_AARCH64 = build_cache("wheel-test-examples-aarch64")  # /<onnxruntime version>
SYSROOT_AARCH64 = Path("/usr/aarch64-linux-gnu")  # libc6-arm64-cross (with g++-aarch64-linux-gnu)
LIBRARY_IN_WHEEL = "bitnet_onnx/libbitnet_onnx_ops.so"
ARCHES = ("x86_64", "aarch64")
ELF_MACHINE = {"x86_64": "Advanced Micro Devices X86-64", "aarch64": "AArch64"}
LOADER = {"x86_64": "ld-linux-x86-64.so.2", "aarch64": "ld-linux-aarch64.so.1"}
GLIBC_LIBRARIES = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2"}
NEWEST_GLIBC = (2, 28)
# The ISAs each machine's library builds: the CPU-flag oracle's (tests/cpu_isas.py) and scalar.
BUILT_ISAS = {arch: set(ISA_FLAGS[arch]) | {"scalar"} for arch in ARCHES}
# qemu-aarch64 CPU models -> the best NEON multiply path each runs, by the oracle's flags of each model.
QEMU_CPU_PATH = {cpu: best_isa_of("aarch64", flags) for cpu, flags in QEMU_CPU_FLAGS.items()}
AARCH64_PATHS = [isa for isa in ALL_ISAS if isa in ISA_FLAGS["aarch64"]]  # best first, as the ISA table lists them
HINT = "scripts/setup.sh --test installs what these tests need (qemu-user, g++-aarch64-linux-gnu)"

TEXTS = [
    "What is the capital of France?",
    "Paris is the capital and largest city of France.",
    "Ternary weights",
    "The quick brown fox jumps over the lazy dog while the weather is sunny with a light breeze.",
]

pytestmark = [pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                 reason="installs and runs the x86-64 wheel here and the aarch64 one under qemu-aarch64"),
              pytest.mark.slow]  # the suite's tiers (tests/suite_marks.py); venv and qemu by test


def _tool(name: str) -> str:
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found ({HINT})")
    return found


def _entry_points() -> set[str]:
    """The symbols customops/ort/exports.map makes global."""
    text = (REPO / "customops" / "ort" / "exports.map").read_text()
    body = re.search(r"global:(.*?)local:", text, re.S)
    assert body, "exports.map has no global: ... local: section"
    return {s.strip() for s in body.group(1).split(";") if s.strip()}


# -- the build, once per session ------------------------------------------------------------------
@pytest.fixture(scope="session")
def wheels() -> dict[str, Path]:
    """scripts/build_wheels.sh into DIST: arch -> wheel (the sdist beside them)."""
    shutil.rmtree(DIST, ignore_errors=True)
    with locked(WORK.parent / f"{WORK.name}.lock"):
        res = _run(["bash", REPO / "scripts" / "build_wheels.sh", "--out", DIST], timeout=3000,
                   env={**os.environ, "BITNET_WHEEL_WORK": str(WORK)})
    assert res.returncode == 0, f"scripts/build_wheels.sh failed:\n{res.stderr[-6000:]}"
    found = {arch: sorted(DIST.glob(f"bitnet_onnx-*-py3-none-manylinux_2_28_{arch}.whl")) for arch in ARCHES}
    assert all(len(f) == 1 for f in found.values()), f"expected one wheel per architecture in {DIST}: {found}"
    assert len(list(DIST.glob("bitnet_onnx-*.tar.gz"))) == 1, f"no sdist in {DIST}"
    return {arch: f[0] for arch, f in found.items()}


@pytest.fixture(scope="session")
def libraries(wheels, tmp_path_factory) -> dict[str, Path]:
    """arch -> the op library taken out of that wheel."""
    out = {}
    for arch, wheel in wheels.items():
        dest = tmp_path_factory.mktemp(f"library-{arch}") / "libbitnet_onnx_ops.so"
        with zipfile.ZipFile(wheel) as z:
            assert LIBRARY_IN_WHEEL in z.namelist(), f"{wheel.name} has no {LIBRARY_IN_WHEEL}"
            dest.write_bytes(z.read(LIBRARY_IN_WHEEL))
        out[arch] = dest
    return out


# -- (3) what the wheels carry ----------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHES)
def test_auditwheel_says_manylinux_2_28_or_older(wheels, arch):
    res = _ok([WORK / "tools" / "bin" / "auditwheel", "show", wheels[arch]])
    text = " ".join(res.stdout.split())
    verdict = re.search(rf'consistent with the following platform tag: "manylinux_2_(\d+)_{arch}"', text)
    assert verdict, f"auditwheel named no manylinux tag:\n{res.stdout}"
    assert int(verdict.group(1)) <= 28, f"auditwheel: manylinux_2_{verdict.group(1)}_{arch}"


@pytest.mark.parametrize("arch", ARCHES)
def test_library_needs_only_old_glibc_and_exports_the_entry_points(libraries, arch):
    library = libraries[arch]
    header = _ok(["readelf", "-h", library]).stdout
    assert ELF_MACHINE[arch] in header, f"the {arch} wheel's library is not for {arch}:\n{header}"

    dynamic = _ok(["readelf", "-d", "-W", library]).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic))
    assert needed <= GLIBC_LIBRARIES | {LOADER[arch]}, f"links more than glibc: {sorted(needed)}"
    assert "libc.so.6" in needed

    versions = _ok(["readelf", "-V", "-W", library]).stdout
    required = re.findall(r"Name: (\S+)\s+Flags", versions)
    assert required and all(v.startswith("GLIBC_") for v in required), f"non-glibc symbol versions: {required}"
    newest = max(tuple(int(x) for x in v[len("GLIBC_"):].split(".")[:2]) for v in required)
    assert newest <= NEWEST_GLIBC, f"needs GLIBC_{newest[0]}.{newest[1]} (> 2.28)"

    symbols = _ok(["readelf", "--dyn-syms", "-W", library]).stdout
    exported = set()
    for line in symbols.splitlines():
        fields = line.split()  # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) >= 8 and fields[4] in ("GLOBAL", "WEAK") and fields[6] != "UND":
            exported.add(fields[7].split("@")[0])
    assert exported == _entry_points()


def test_x86_library_has_every_isa_path(libraries):
    """The instructions of each x86 kernel file: AMX tiles, zmm VNNI, VEX (AVX-VNNI) ymm VNNI, AVX2."""
    code = _ok(["objdump", "-d", "--no-show-raw-insn", libraries["x86_64"]], timeout=300).stdout
    assert re.search(r"\btdpbssd\b", code) and "ldtilecfg" in code, "no AMX tile multiply (amx.cc)"
    assert re.search(r"\bvpdpbusd\s+%zmm", code), "no AVX-512 VNNI (avx512vnni.cc)"
    assert re.search(r"\{vex\} vpdpbusd\s+%ymm", code), "no AVX-VNNI (avxvnni.cc)"
    assert re.search(r"\bvpmaddubsw\s+%ymm", code), "no AVX2 int8 multiply (avx2.cc)"


KERNEL_NAMES_C = textwrap.dedent("""\
    #include <dlfcn.h>
    #include <stdio.h>
    int main(int argc, char** argv) {
      void* lib = dlopen(argv[1], RTLD_NOW);
      if (!lib) { fprintf(stderr, "%s\\n", dlerror()); return 1; }
      const char* (*names)(void) = (const char* (*)(void))dlsym(lib, "bitnet_onnx_kernel_names");
      if (!names) { fprintf(stderr, "no bitnet_onnx_kernel_names\\n"); return 1; }
      fputs(names(), stdout);
      return argc > 2;
    }
    """)


@pytest.mark.parametrize("cpu", list(QEMU_CPU_PATH))
@pytest.mark.qemu
def test_aarch64_library_has_every_neon_path(libraries, qemu_aarch64, tmp_path, cpu):
    """i8mm, dotprod and plain NEON built (SMMLA and SDOT in the code); the library's own ISA table
    under qemu-aarch64 says each CPU model runs exactly the paths its HWCAP bits allow."""
    library = libraries["aarch64"]
    code = _ok([_tool("aarch64-linux-gnu-objdump"), "-d", "--no-show-raw-insn", library], timeout=300).stdout
    assert re.search(r"\bsdot\b", code), "no SDOT instruction (neon_dotprod.cc)"
    assert re.search(r"\bsmmla\b", code), "no SMMLA instruction (neon_i8mm.cc)"
    source = tmp_path / "kernel_names.c"
    source.write_text(KERNEL_NAMES_C)
    exe = tmp_path / "kernel_names"
    _ok([_tool("aarch64-linux-gnu-gcc"), "-O1", source, "-o", exe, "-ldl"])
    res = _ok([qemu_aarch64, "-cpu", cpu, "-L", SYSROOT_AARCH64, exe, library])
    table = {line.split("\t")[0]: line.split("\t")[1:] for line in res.stdout.splitlines()}
    assert {name for name, (built, _runs, _needs) in table.items() if built == "1"} == BUILT_ISAS["aarch64"]
    runs = [name for name in AARCH64_PATHS if table[name][1] == "1"]
    assert runs == AARCH64_PATHS[AARCH64_PATHS.index(QEMU_CPU_PATH[cpu]):], f"qemu's {cpu}: {table}"


# -- (1) a fresh venv with only the x86-64 wheel ----------------------------------------------------
@tier_fixture("venv", scope="module")
def fresh_venv(wheels, tmp_path_factory) -> Path:
    """A new venv holding the x86-64 wheel and its PyPI dependencies, nothing else."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    _ok([sys.executable, "-m", "venv", venv])
    _ok([venv / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", "-q", wheels["x86_64"]],
        timeout=1200)
    return venv


def _fresh(venv: Path, args: list, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return _ok(args, timeout, env=_fresh_env(venv), cwd=cwd)


def _fresh_python(venv: Path, code: str, cwd: Path) -> str:
    return _fresh(venv, [venv / "bin" / "python", "-c", textwrap.dedent(code)], cwd).stdout


def _fresh_library(venv: Path, cwd: Path) -> Path:
    return Path(_fresh_python(venv, "from bitnet_onnx import customops; print(customops.library_path())", cwd).strip())


@pytest.mark.venv
def test_fresh_venv_has_no_compiler_and_loads_the_wheels_library(fresh_venv, libraries, tmp_path):
    found = _fresh_python(fresh_venv, """
        import shutil
        print(*[c for c in ("cc", "c++", "gcc", "g++", "clang", "cmake", "zig") if shutil.which(c)])
        """, tmp_path).split()
    assert found == [], f"on the fresh venv's PATH: {found}"
    library = _fresh_library(fresh_venv, tmp_path)
    assert library.is_relative_to(fresh_venv), f"library outside the venv: {library}"
    assert library.read_bytes() == libraries["x86_64"].read_bytes()
    built = _fresh_python(fresh_venv, """
        from bitnet_onnx import customops
        print(*[k.name for k in customops.library_kernels() if k.built])
        """, tmp_path).split()
    assert set(built) == BUILT_ISAS["x86_64"]


# -- the wheel's library computes what ours does, to the bit ----------------------------------------
# tests/test_op.py and tests/test_attention_op.py hold this checkout's library to the numpy references;
# the wheel's library (Zig's clang and libc++) must then give the very same output bytes as ours (the
# system g++) on their cases. Both build the kernels with -ffp-contract=off and the same per-file ISA
# flags, so any difference is a compiler or build-flag difference, not rounding to tolerate.
# BITNET_ONNX_KERNEL: each I2S family the library states forced, at the best ISA and at scalar (every family
# has a scalar reference kernel: docs/contributing.md's recipe)
KERNEL_FAMILIES = tuple(family.name for family in customops.dispatch().families)


def _save_graph(folder: Path, name: str, model: bytes, feeds: dict[str, np.ndarray]) -> None:
    (folder / f"{name}.onnx").write_bytes(model)
    np.savez(folder / f"{name}.npz", **feeds)


def _index_entry(graph: str, env: dict[str, str | None]) -> dict:
    """An index entry: run <graph>.onnx on <graph>.npz with these variables set (None: unset)."""
    return {"graph": graph, "env": env}


def _i2s_cases(folder: Path) -> dict[str, dict]:
    """test_op's cases (every K, N, M, X rank, norm, W constant or fed) and rows with NaN and
    infinities, on every ISA this CPU runs and the library's default, each kernel family forced."""
    runs = {}
    isas = (None, *i2s_op.ISAS)
    for case in i2s_op.CASES:
        k, n, shape, norm, w_const, random_bytes = case
        x, w, scale, nw = i2s_op.random_case(np.random.default_rng(k * 7 + n), k, n, shape, norm, random_bytes)
        graph = f"i2s-{i2s_op.case_id(case)}"
        _save_graph(folder, graph, i2s_op.make_model(k, n, w, scale, nw, w_const=w_const, x_rank=len(shape)),
                    {"X": x} if w_const else {"X": x, "W": w})
        chosen = [(isa, None) for isa in isas] + [(isa, kind) for isa in (None, "scalar") for kind in KERNEL_FAMILIES]
        for isa, family in chosen:
            runs[f"{graph}-{isa or 'default'}-{family or 'any'}"] = _index_entry(
                graph, {customops.ISA_ENV: isa, customops.KERNEL_ENV: family})
    x, w, scale, nw = i2s_op.random_case(np.random.default_rng(11), 256, 64, (6, 256), np.float32)
    x[1, 3], x[3, 200], x[4, 0] = np.nan, np.inf, -np.inf
    _save_graph(folder, "i2s-nonfinite", i2s_op.make_model(256, 64, w, scale, nw), {"X": x})
    for isa in isas:
        env = {customops.ISA_ENV: isa, customops.KERNEL_ENV: None}
        runs[f"i2s-nonfinite-{isa or 'default'}"] = _index_entry("i2s-nonfinite", env)
    return runs


def _attention_cases(folder: Path) -> dict[str, dict]:
    """test_attention_op's cases (every band, GQA ratio, head dim, padding kind) at both precisions,
    on every attention path this CPU has and the library's default."""
    runs = {}
    for case in attention_op.CASES:
        b, s, hq, hkv, d, causal, left, right = case
        q, k, v, mask = attention_op.inputs(b, s, hq, hkv, d, seed=s + d)
        attrs = dict(scale=d ** -0.5 * 1.25, **attention_op.band_attrs(causal, left, right))
        for precision in ("f32", "bf16"):
            graph = f"attention-{attention_op._case_id(case)}-{precision}"
            _save_graph(folder, graph, attention_op.make_model(hq, hkv, precision=precision, **attrs),
                        {"q": q, "k": k, "v": v, "mask": mask})
            for isa in (None, *attention_op.ISAS):
                runs[f"{graph}-{isa or 'default'}"] = _index_entry(graph, {customops.ISA_ENV: isa})
    return runs


# Run by both Pythons, this checkout's venv and the fresh one (numpy, onnxruntime and the package
# only): index.json's runs, one output file each.
RUN_CASES = textwrap.dedent("""\
    import json, os, sys
    from pathlib import Path
    import numpy as np, onnxruntime as ort
    from bitnet_onnx import customops
    cases, out = Path(sys.argv[1]), Path(sys.argv[2])
    print(customops.library_path())
    for name, run in json.loads((cases / "index.json").read_text()).items():
        for var, value in run["env"].items():  # read by the library when a session creates the op's kernel
            os.environ.pop(var, None) if value is None else os.environ.update({var: value})
        session = ort.InferenceSession(str(cases / f"{run['graph']}.onnx"), customops.session_options(threads=1),
                                       providers=["CPUExecutionProvider"])
        np.save(out / f"{name}.npy", session.run(None, dict(np.load(cases / f"{run['graph']}.npz")))[0])
    """)


def _run_cases(python: Path, env: dict, cases: Path, out: Path) -> Path:
    """RUN_CASES by `python`, outputs into `out`; returns the op library it loaded."""
    out.mkdir(parents=True)
    script = out.parent / "run_cases.py"
    script.write_text(RUN_CASES)
    return Path(_ok([python, script, cases, out], timeout=900, env=env, cwd=out.parent).stdout.strip())


def _difference(name: str, ours: np.ndarray, wheel: np.ndarray) -> str:
    if ours.shape != wheel.shape or ours.dtype != wheel.dtype:
        return f"{name}: {ours.dtype}{ours.shape} here, {wheel.dtype}{wheel.shape} from the wheel"
    differ = ours.view(np.uint8).reshape(ours.size, -1) != wheel.view(np.uint8).reshape(wheel.size, -1)
    return (f"{name}: {int(differ.any(1).sum())} of {ours.size} values differ, by up to "
            f"{np.nanmax(np.abs(ours.astype(np.float64) - wheel)):.3g}")


@pytest.mark.venv
def test_wheels_library_gives_our_librarys_bits(fresh_venv, tmp_path):
    """The op tests' I2STernaryMatMul and EncoderAttention cases (shapes, norms, masks, bands and
    precisions; each ISA path this CPU has, forced by BITNET_ONNX_ISA, and the default) run by the
    fresh venv on the wheel's library and by this venv on this checkout's: the same output bytes."""
    cases = tmp_path / "cases"
    cases.mkdir()
    runs = {**_i2s_cases(cases), **_attention_cases(cases)}
    (cases / "index.json").write_text(json.dumps(runs))
    ours_env = {k: v for k, v in os.environ.items() if k not in (customops.ISA_ENV, customops.KERNEL_ENV)}
    ours = _run_cases(Path(sys.executable), ours_env, cases, tmp_path / "ours" / "out")
    wheel = _run_cases(fresh_venv / "bin" / "python", _fresh_env(fresh_venv), cases, tmp_path / "wheel" / "out")
    assert ours == Path(customops.library_path()) and wheel.is_relative_to(fresh_venv), (ours, wheel)
    differing = []
    for name in runs:
        mine, theirs = (np.load(tmp_path / side / "out" / f"{name}.npy") for side in ("ours", "wheel"))
        if mine.shape != theirs.shape or mine.dtype != theirs.dtype or mine.tobytes() != theirs.tobytes():
            differing.append(_difference(name, mine, theirs))
    assert not differing, f"{len(differing)} of {len(runs)} runs differ:\n" + "\n".join(differing)
    for folder in ("cases", "ours", "wheel"):  # some 700 MB, kept only when runs differ
        shutil.rmtree(tmp_path / folder)


@pytest.fixture(scope="module")
def fresh_export(fresh_venv, qwen3_bitnet, tmp_path_factory) -> Path:
    """The tiny Qwen3 BitNet model exported by the fresh venv's `bitnet-onnx export` (i2s)."""
    out = tmp_path_factory.mktemp("fresh-export") / "out"
    _fresh(fresh_venv, [fresh_venv / "bin" / "bitnet-onnx", "export", qwen3_bitnet, "-o", out], out.parent)
    assert Manifest.read(out).weights == "i2s"
    return out


@pytest.mark.venv
def test_fresh_venv_export_embed_and_embedder(fresh_venv, fresh_export, tmp_path):
    """`bitnet-onnx embed` and `Embedder` in the fresh venv agree, and equal this checkout's own build."""
    from bitnet_onnx import Embedder

    npy = tmp_path / "cli.npy"
    _fresh(fresh_venv, [fresh_venv / "bin" / "bitnet-onnx", "embed", fresh_export, *TEXTS, "--threads", "1",
                        "--quiet", "--output", npy], tmp_path)
    from_cli = np.load(npy)
    script = tmp_path / "embedder.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        from bitnet_onnx import Embedder
        np.save({str(tmp_path / 'embedder.npy')!r}, Embedder({str(fresh_export)!r}, threads=1).encode({TEXTS!r}))
        """))
    _fresh(fresh_venv, [fresh_venv / "bin" / "python", script], tmp_path)
    from_embedder = np.load(tmp_path / "embedder.npy")
    assert from_cli.shape == from_embedder.shape == (len(TEXTS), Manifest.read(fresh_export).dimension)
    np.testing.assert_array_equal(from_cli, from_embedder)
    here = Embedder(fresh_export, threads=1).encode(TEXTS)  # this checkout's op library (system compiler)
    np.testing.assert_allclose(from_embedder, here, rtol=0, atol=1e-5)


def _write_ids(path: Path, folder: Path) -> Path:
    rows = TextTokenizer.from_folder(folder).tokenize(TEXTS)
    path.write_text("".join(" ".join(map(str, row)) + "\n" for row in rows), encoding="utf-8")
    return path


# What ORT's cpuinfo prints under qemu-user, which has no CPU vendor to report (not our library).
QEMU_VENDOR_WARNING = "onnxruntime cpuid_info warning: Unknown CPU vendor. cpuinfo_vendor value: 0"


def _embed_c_args(program: list, library: Path, folder: Path, ids_file: Path) -> list:
    manifest = Manifest.read(folder)
    return [*program, "--threads", "1", "--pad-side", manifest.padding_side, "--pad-id", manifest.pad_token_id,
            library, folder / manifest.model_file, ids_file]


def _embed_c(program: list, library: Path, folder: Path, ids_file: Path, under_qemu: bool = False,
             env: dict | None = None) -> np.ndarray:
    res = _ok(_embed_c_args(program, library, folder, ids_file), timeout=900, env=env)
    stderr = [line for line in res.stderr.splitlines()
              if line.strip() and not (under_qemu and line == QEMU_VENDOR_WARNING)]
    assert stderr == [], res.stderr
    return np.array([[float(v) for v in line.split()] for line in res.stdout.splitlines()], np.float32)


@pytest.mark.venv
def test_c_example_on_the_wheels_library(host_programs, fresh_venv, fresh_export, tmp_path):
    """examples/c (system compiler, the onnxruntime wheel's libonnxruntime) with the wheel's op library
    equals an InferenceSession of the fresh venv on the same ids."""
    ids_file = _write_ids(tmp_path / "ids.txt", fresh_export)
    got = _embed_c([host_programs["embed_c"]], _fresh_library(fresh_venv, tmp_path), fresh_export, ids_file)
    script = tmp_path / "session.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np, onnxruntime as ort
        from bitnet_onnx import customops
        from bitnet_onnx.runtime.tokenization import TextTokenizer
        ids, mask = TextTokenizer.from_folder({str(fresh_export)!r}).encode({TEXTS!r})
        sess = ort.InferenceSession({str(fresh_export / 'model.onnx')!r}, customops.session_options(threads=1),
                                    providers=["CPUExecutionProvider"])
        out = sess.run(["sentence_embedding"], {{"input_ids": ids, "attention_mask": mask}})[0]
        np.save({str(tmp_path / 'session.npy')!r}, out)
        """))
    _fresh(fresh_venv, [fresh_venv / "bin" / "python", script], tmp_path)
    expected = np.load(tmp_path / "session.npy")
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


# -- (2) the aarch64 library in the aarch64 ONNX Runtime, under qemu --------------------------------
def _ort_headers() -> Path:
    env = os.environ.get("ONNXRUNTIME_INCLUDE_DIR")
    headers = Path(env) if env else WORK / "ort-headers" / "include"  # fetched by build_wheels.sh
    assert (headers / "onnxruntime_c_api.h").is_file(), f"no onnxruntime_c_api.h in {headers}"
    return headers


# Not the version installed here: the aarch64 builds of onnxruntime >= 1.28 die with SIGSEGV while
# the library initializes under Debian 12's qemu-user 7.2 (right after reading the host's
# /sys/devices/system/cpu/*/cache, an x86 topology), before any of our code runs; 1.27.0 is the
# newest that loads there. The op library supports onnxruntime >= 1.21, so any of them is a fair host.
AARCH64_ORT_VERSION = "1.27.0"


@pytest.fixture(scope="module")
def aarch64_onnxruntime() -> Path:
    """libonnxruntime.so of the aarch64 onnxruntime wheel AARCH64_ORT_VERSION (downloaded once into the
    tests' cache, for every checkout)."""
    version = AARCH64_ORT_VERSION
    lib_dir = ORT_AARCH64 / version
    with locked(ORT_AARCH64 / f"{version}.lock"):
        libs = sorted(lib_dir.glob("libonnxruntime.so.*"))
        if not libs:
            _download_aarch64_onnxruntime(version, lib_dir)
            libs = sorted(lib_dir.glob("libonnxruntime.so.*"))
    assert libs, f"the aarch64 onnxruntime {version} wheel has no capi/libonnxruntime.so.*"
    assert ELF_MACHINE["aarch64"] in _ok(["readelf", "-h", libs[0]]).stdout
    return libs[0]


def _download_aarch64_onnxruntime(version: str, lib_dir: Path) -> None:
    """pip download the wheel; its capi/libonnxruntime.so.<version> into lib_dir."""
    download = ORT_AARCH64 / "download"
    _ok([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", f"onnxruntime=={version}",
         "--platform", "manylinux_2_28_aarch64", "--only-binary=:all:", "--no-deps", "-d", download], timeout=900)
    wheel = sorted(download.glob(f"onnxruntime-{version}-*aarch64*.whl"))
    assert wheel, f"pip download gave no aarch64 onnxruntime {version} wheel in {download}"
    lib_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel[0]) as z:
        for name in z.namelist():
            if re.fullmatch(r"onnxruntime/capi/libonnxruntime\.so\.[0-9.]+", name):
                (lib_dir / Path(name).name).write_bytes(z.read(name))


@pytest.fixture(scope="module")
def aarch64_embed_c(aarch64_onnxruntime) -> Path:
    """examples/c cross-built for aarch64 (g++-aarch64-linux-gnu) against the aarch64 libonnxruntime."""
    ninja = shutil.which("ninja", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    cmake = shutil.which("cmake", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    assert ninja and cmake, "cmake and ninja (pip) are needed to build examples/"
    _tool("aarch64-linux-gnu-gcc")
    build = EXAMPLES_AARCH64 / AARCH64_ORT_VERSION
    with locked(EXAMPLES_AARCH64 / f"{AARCH64_ORT_VERSION}.lock"):
        _ok([cmake, "-S", via_checkout_link(REPO / "examples"), "-B", build, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
             f"-DCMAKE_TOOLCHAIN_FILE={REPO / 'scripts' / 'aarch64-toolchain.cmake'}", "-DCMAKE_BUILD_TYPE=Release",
             f"-DONNXRUNTIME_INCLUDE_DIR={_ort_headers()}", f"-DONNXRUNTIME_LIB={aarch64_onnxruntime}",
             "-DCMAKE_C_FLAGS=-Werror", *ccache_cmake_args()], env=ccache_env())
        _ok([ninja, "-C", build, "-j2", "embed_c"], env=ccache_env())
    return build / "embed_c"


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("cpu", list(QEMU_CPU_PATH))  # the i8mm, dotprod and plain NEON paths
@pytest.mark.parametrize("arch", list(ARCHITECTURES))
@pytest.mark.qemu
def test_aarch64_embeddings_equal_x86(host_programs, aarch64_embed_c, qemu_aarch64, libraries, tiny_model,
                                      tiny_export, arch, cpu, tmp_path):
    """Each CPU model's best path, forced by name (BITNET_ONNX_ISA fails the session if the CPU
    lacked it), gives the x86-64 wheel's embeddings: the I2S kernels are bit-exact on both."""
    folder = tiny_export(tiny_model(arch))
    assert Manifest.read(folder).weights == "i2s"
    ids_file = _write_ids(tmp_path / "ids.txt", folder)
    on_x86 = _embed_c([host_programs["embed_c"]], libraries["x86_64"], folder, ids_file)
    qemu = [qemu_aarch64, "-cpu", cpu, "-L", SYSROOT_AARCH64, aarch64_embed_c]
    env = dict(os.environ, BITNET_ONNX_ISA=QEMU_CPU_PATH[cpu])
    on_aarch64 = _embed_c(qemu, libraries["aarch64"], folder, ids_file, under_qemu=True, env=env)
    assert on_aarch64.shape == on_x86.shape == (len(TEXTS), Manifest.read(folder).dimension)
    cos = _cosines(on_x86, on_aarch64)
    assert cos.min() >= 0.9999999, f"{arch} on qemu {cpu}: cosines {cos}"


@pytest.mark.qemu
def test_aarch64_i8mm_refused_where_the_cpu_lacks_it(aarch64_embed_c, qemu_aarch64, libraries, tiny_model, tiny_export,
                                                    tmp_path):
    """BITNET_ONNX_ISA=i8mm on a core without it (qemu's neoverse-n1) fails with a one-line reason."""
    folder = tiny_export(tiny_model("qwen3"))
    qemu = [qemu_aarch64, "-cpu", "neoverse-n1", "-L", SYSROOT_AARCH64, aarch64_embed_c]
    args = _embed_c_args(qemu, libraries["aarch64"], folder, _write_ids(tmp_path / "ids.txt", folder))
    res = _run(args, timeout=900, env=dict(os.environ, BITNET_ONNX_ISA="i8mm"))
    assert res.returncode != 0 and res.stdout == "", res.stdout[-2000:]
    assert "BITNET_ONNX_ISA=i8mm: this CPU lacks i8mm (needs " in res.stderr, res.stderr[-2000:]
