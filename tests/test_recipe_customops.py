"""The "Add a kernel ISA", "Add a kernel family" and "Add a custom op" recipes of
docs/contributing.md, kept true: each test fails when a step of a recipe is skipped (a name missing
from a table, a page, a version). The family recipe is also followed with a fake family in a copy of
the family tree, skipping each step in turn, so that every step is seen to fail by name."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from bitnet_onnx import customops
from bitnet_onnx.bench.variants import family_variants_of
from bitnet_onnx.export.builder import DOMAIN_VERSIONS
from bitnet_onnx.ternary import pack_i2s
from build_cache import build_cache, ccache_cmake_args, ccache_env
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
    """Step: each family maps the ISA (kernels/i2s/<family>/dispatch.cc, kernels/attention/dispatch.cc).
    (A family table without a row for an ISA does not compile: isa.h's isa_row, family.h's
    KernelFamily; test_every_family_has_a_row_per_isa names the family.)"""
    monkeypatch.setenv(customops.ISA_ENV, isa)
    options = customops.session_options(threads=1)
    i2s = ort.InferenceSession(_i2s_model(), options, providers=["CPUExecutionProvider"])
    (y,) = i2s.run(None, {"X": np.ones((1, 128), np.float32)})
    assert y.shape == (1, 32) and not y.any()  # all-zero ternary weights
    attention = ort.InferenceSession(_attention_model(), options, providers=["CPUExecutionProvider"])
    # head_dim 32: every path's own tiles take it (a forced ISA refuses a head dim its path does not take)
    q = np.ones((1, 3, 64), np.float32)
    (out,) = attention.run(None, {"q": q, "k": q[:, :, :32], "v": q[:, :, :32], "mask": np.ones((1, 3), np.int64)})
    np.testing.assert_array_equal(out, q)  # equal values: softmax-weighted mean of ones


def test_every_family_has_a_row_per_isa():
    """Step: every I2S family's dispatch.cc has the ISA's row, in isa.h's order (null where the
    family has no kernel for it), so a new ISA is named in each family or the build says which."""
    gaps = [gap for gap in family_recipe_gaps(I2S, ISA_HEADER) if "IsaRow" in gap]
    assert gaps == [], gaps


def _isa_records(isa_source: Path) -> list[str]:
    """The names of isa.cc's kIsaTable records, in order."""
    return re.findall(r'^    \{kIsa\w+, "(\w+)"', isa_source.read_text(), flags=re.M)


def test_the_dispatch_description_lists_every_row_of_the_tables():
    """The library's dispatch (bitnet_onnx_dispatch, what every Python map derives from) names every record of
    isa.cc's table and every row of families.h, in their order: a row removed from either is missing by name."""
    described = customops.dispatch({})
    records = _isa_records(ISA_HEADER.with_suffix(".cc"))
    assert len(records) == len(_isa_enum(ISA_HEADER)), records
    assert described.isa_names() == records
    assert [family.name for family in described.families] == _table_rows(I2S)


def test_isa_table_order_and_names():
    """Step: the record goes into the table best first; scalar, the fallback, stays last."""
    names = [isa.name for isa in KERNELS]
    assert names[-1] == "scalar" and len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]+", name) for name in names), names


# -- Add a kernel family ---------------------------------------------------------------------------

I2S = REPO / "customops" / "kernels" / "i2s"  # the driver, the seam (family.h), the table (families.h)
ISA_HEADER = REPO / "customops" / "kernels" / "isa.h"


def _isa_enum(isa_header: Path) -> list[str]:
    """isa.h's Isa values in order (kIsaCount left out): the rows every IsaRow array must have."""
    body = re.search(r"enum Isa : int \{(.*?)\};", isa_header.read_text(), flags=re.S)
    assert body, f"{isa_header}: no enum Isa"
    return [name for name in re.findall(r"\bkIsa\w+", body.group(1)) if name != "kIsaCount"]


def _table_rows(i2s: Path) -> list[str]:
    """The rows X(<name>) of families.h (what CMake and the C++ table read)."""
    return re.findall(r"^[ \t]*X\((\w+)\)", (i2s / "families.h").read_text(), flags=re.M)


def family_recipe_gaps(i2s: Path, isa_header: Path) -> list[str]:
    """Every skipped step of docs/contributing.md's "Add a kernel family", for every family of the
    table or folder under `i2s`, named "<family>: step <n> (<what>)"; empty when the recipe holds."""
    isas = _isa_enum(isa_header)
    rows = _table_rows(i2s)
    folders = sorted(path.name for path in i2s.iterdir() if path.is_dir())
    gaps = [f"{name}: step 2 (a row X({name}) in kernels/i2s/families.h)" for name in folders if name not in rows]
    gaps += [f"{name}: step 1 (the folder kernels/i2s/{name}/)" for name in rows if name not in folders]
    for name in sorted(set(folders) & set(rows)):
        folder = i2s / name
        cmake = folder / "CMakeLists.txt"
        sources = re.search(r"^i2s_family\(([^)]*)\)", cmake.read_text(), flags=re.M) if cmake.is_file() else None
        if not sources or "dispatch.cc" not in sources.group(1).split():
            gaps.append(f"{name}: step 1 (CMakeLists.txt calling i2s_family(dispatch.cc ...))")
        dispatch = folder / "dispatch.cc"
        text = dispatch.read_text() if dispatch.is_file() else ""
        table = re.search(r"const IsaRow<I2SKernel> \w+\[\] = \{(.*?)\};", text, flags=re.S)
        labelled = re.findall(r"/\*(kIsa\w+)=\*/\s*([^,]+),", table.group(1)) if table else []
        if [label for label, _ in labelled] != isas:
            gaps.append(f"{name}: step 1 (dispatch.cc's IsaRow<I2SKernel> array, one /*kIsa...=*/ row per Isa of isa.h)")
        elif dict(labelled)["kIsaScalar"].strip() == "nullptr":
            gaps.append(f"{name}: step 1 (a scalar reference kernel in the kIsaScalar row)")
        if not re.search(rf'KernelFamily \w+ = \{{"{name}", ', text):
            gaps.append(f'{name}: step 1 (a KernelFamily named "{name}" in dispatch.cc)')
        if not (re.search(rf"^namespace bitnet_onnx::i2s::{name} \{{$", text, flags=re.M)
                and re.search(r"^const KernelFamily\* family\(\) \{", text, flags=re.M)):
            gaps.append(f"{name}: step 1 (dispatch.cc defining {name}::family(), in namespace bitnet_onnx::i2s::{name})")
        for source in sorted(folder.iterdir()):
            included = re.findall(r'^#include "([^"]+)"', source.read_text(), flags=re.M) if source.is_file() else []
            shared = folder.parent.parent  # kernels/: isa.h and the headers every kernel folder may use
            foreign = [h for h in included if not (folder / h).is_file() and h != "family.h" and not (shared / h).is_file()]
            if foreign:
                gaps.append(f"{name}: step 1 ({source.name} includes {foreign}: only the seam, kernels/'s shared headers "
                            "and its own files)")
    return gaps


def test_family_table_folders_and_rows_agree():
    """Step 1 and 2 for every family: a folder per row of families.h and a row per folder, each folder
    with its CMakeLists.txt, its IsaRow array of one row per Isa, a scalar reference and its entry."""
    assert _table_rows(I2S)[0] == "mul", "the base family (every ISA, every shape) comes first"
    assert family_recipe_gaps(I2S, ISA_HEADER) == []


def test_the_library_runs_every_family_of_the_table(monkeypatch):
    """Step 3: BITNET_ONNX_KERNEL accepts each row's name (on the scalar ISA, where every family has
    its reference) and lists exactly the rows, after its own values measure and rules, when refusing a value."""
    rows = _table_rows(I2S)
    monkeypatch.setenv(customops.ISA_ENV, "scalar")
    for name in rows:
        monkeypatch.setenv(customops.KERNEL_ENV, name)
        session = ort.InferenceSession(_i2s_model(), customops.session_options(threads=1),
                                       providers=["CPUExecutionProvider"])
        (y,) = session.run(None, {"X": np.ones((1, 128), np.float32)})
        assert y.shape == (1, 32) and not y.any(), name
    monkeypatch.setenv(customops.KERNEL_ENV, "nosuchfamily")
    expected = ", ".join(["measure", "rules", *rows[:-1]]) + " or " + rows[-1]
    with pytest.raises(Exception, match=rf"unknown kernel family; expected {expected}$"):
        ort.InferenceSession(_i2s_model(), customops.session_options(threads=1), providers=["CPUExecutionProvider"])


FAKE = "fake"
FAKE_CMAKE = "# The fake family of tests/test_recipe_customops.py.\ni2s_family(dispatch.cc scalar.cc)\n"


def _fake_dispatch(isas: list[str]) -> str:
    rows = "\n".join(f"    /*{isa}=*/{'scalar_kernel' if isa == 'kIsaScalar' else 'nullptr'}," for isa in isas)
    return (f'#include "family.h"\n#include "fake_kernels.h"\n\nnamespace bitnet_onnx::i2s::{FAKE} {{\n'
            f"namespace {{\n\nconst IsaRow<I2SKernel> kFakeKernels[] = {{\n{rows}\n}};\n"
            f'const KernelFamily kFake = {{"{FAKE}", kFakeKernels, nullptr, 0}};\n\n}}  // namespace\n\n'
            f"const KernelFamily* family() {{ return &kFake; }}\n\n}}  // namespace bitnet_onnx::i2s::{FAKE}\n")


FAKE_HEADER = """// The fake family's kernels (tests/test_recipe_customops.py).
#pragma once

#include "family.h"

namespace bitnet_onnx::i2s::fake {
const I2SKernel* scalar_kernel();
}  // namespace bitnet_onnx::i2s::fake
"""

# A plain reference kernel: the I2_S bytes as they are, a dot that decodes each weight's code, no
# quantizer (the driver's, the ISA's). kernel_test holds it to the same exact sums as every other kernel.
FAKE_SCALAR = """#include <cstring>

#include "fake_kernels.h"

namespace bitnet_onnx::i2s::fake {
namespace {

size_t packed_bytes(int64_t n, int64_t k) { return static_cast<size_t>(n * (k / 4)); }

void repack(const uint8_t* i2s, int64_t n, int64_t k, uint8_t* packed) { std::memcpy(packed, i2s, packed_bytes(n, k)); }

void dot(const uint8_t* packed, int64_t, int64_t k, const QuantizedRows& rows, int64_t m0, int64_t m1, int64_t n0,
         int64_t n1, int32_t* out, int64_t ld) {
  static const int kValue[4] = {-1, 0, 1, 0};
  for (int64_t j = n0; j < n1; ++j)
    for (int64_t i = m0; i < m1; ++i) {
      int32_t sum = 0;
      for (int64_t c = 0; c < k; ++c) {
        const int64_t w = c % 128;
        const uint8_t byte = packed[j * (k / 4) + (c / 128) * 32 + w % 32];
        sum += rows.q[i * k + c] * kValue[(byte >> (6 - 2 * (w / 32))) & 3];
      }
      out[(i - m0) * ld + (j - n0)] = sum;
    }
}

const I2SKernel kScalar = {"fake-scalar", packed_bytes, repack, /*quantize=*/nullptr, dot, /*tile_m=*/16,
                           /*tile_n=*/64};

}  // namespace

const I2SKernel* scalar_kernel() { return &kScalar; }

}  // namespace bitnet_onnx::i2s::fake
"""


def _write_if_changed(path: Path, data: bytes) -> None:
    """Unchanged files keep their time stamps, so a cached build recompiles only what changed."""
    if not path.is_file() or path.read_bytes() != data:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _kernel_sources(root: Path) -> dict[Path, bytes]:
    """customops/kernels and customops/tests as they would be under `root`."""
    customops = REPO / "customops"
    return {root / "customops" / path.relative_to(customops): path.read_bytes()
            for sub in ("kernels", "tests") for path in (customops / sub).rglob("*") if path.is_file()}


def _fake_family_tree(root: Path, skip: str | None) -> Path:
    """A copy of customops/kernels and customops/tests under `root` with the fake family added by
    the recipe's steps, all but `skip`; returns the copy's i2s folder."""
    wanted = _kernel_sources(root)
    i2s = root / "customops" / "kernels" / "i2s"
    fake_files = {}
    isas = _isa_enum(ISA_HEADER)
    if skip != "folder":
        folder = i2s / FAKE
        if skip != "cmake":
            fake_files[folder / "CMakeLists.txt"] = FAKE_CMAKE
        dispatch = _fake_dispatch(isas)
        if skip == "isa row":  # a row short: what an ISA added to isa.h but not to this family looks like
            dispatch = dispatch.replace("    /*kIsaAvx2=*/nullptr,\n", "")
        if skip == "scalar reference":
            dispatch = dispatch.replace("/*kIsaScalar=*/scalar_kernel", "/*kIsaScalar=*/nullptr")
        if skip == "entry":
            dispatch = dispatch.replace("const KernelFamily* family()", "const KernelFamily* fake_family_entry()")
        if skip == "own files only":
            dispatch = dispatch.replace('#include "fake_kernels.h"', '#include "lut_kernels.h"')
        fake_files[folder / "dispatch.cc"] = dispatch
        fake_files[folder / "fake_kernels.h"] = FAKE_HEADER
        fake_files[folder / "scalar.cc"] = FAKE_SCALAR
    if skip != "table row":
        table = i2s / "families.h"
        text = wanted[table].decode()
        last = _table_rows(I2S)[-1]
        wanted[table] = text.replace(f"  X({last})\n", f"  X({last}) \\\n  X({FAKE})\n").encode()
    wanted.update((path, text.encode()) for path, text in fake_files.items())
    _sync(root, wanted)
    return i2s


def _sync(root: Path, wanted: dict[Path, bytes]) -> None:
    """`root` holds exactly `wanted` (path -> bytes) afterwards."""
    if root.is_dir():  # a cached copy: drop what the tree no longer has
        for path in sorted(root.rglob("*"), reverse=True):
            if path.is_file() and path not in wanted:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    for path, data in wanted.items():
        _write_if_changed(path, data)


# Each step of the recipe -> what its absence must be reported as.
FAMILY_STEPS = {
    "folder": "fake: step 1 (the folder kernels/i2s/fake/)",
    "cmake": "fake: step 1 (CMakeLists.txt calling i2s_family(dispatch.cc ...))",
    "isa row": "fake: step 1 (dispatch.cc's IsaRow<I2SKernel> array",
    "scalar reference": "fake: step 1 (a scalar reference kernel in the kIsaScalar row)",
    "entry": "fake: step 1 (dispatch.cc defining fake::family()",
    "own files only": "fake: step 1 (dispatch.cc includes ['lut_kernels.h']",
    "table row": "fake: step 2 (a row X(fake) in kernels/i2s/families.h)",
}


def test_a_fake_family_by_the_recipe_passes(tmp_path):
    i2s = _fake_family_tree(tmp_path, skip=None)
    assert (i2s / FAKE / "dispatch.cc").is_file() and "X(fake)" in (i2s / "families.h").read_text()
    assert _table_rows(i2s)[-1] == FAKE
    assert family_recipe_gaps(i2s, ISA_HEADER) == []


@pytest.mark.parametrize("step", list(FAMILY_STEPS))
def test_a_fake_family_missing_a_step_fails_by_name(step, tmp_path):
    gaps = family_recipe_gaps(_fake_family_tree(tmp_path, skip=step), ISA_HEADER)
    assert len(gaps) >= 1 and all(gap.startswith("fake: ") for gap in gaps), gaps
    assert any(gap.startswith(FAMILY_STEPS[step]) for gap in gaps), (step, gaps)


# The fake family compiled: the copy is cached in build_cache("recipe-fake-family")/<variant>, outside
# the checkout (unchanged files keep their time stamps), so after the first build only what changed
# recompiles; a fresh clone's first build is served by ccache (tests/build_cache.py: the copies sit
# under CCACHE_BASEDIR, at the same relative place in every checkout).
FAKE_BUILD = build_cache("recipe-fake-family")


def _tool(name: str) -> str:
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if not found:
        pytest.fail(f"{name} not found: the recipe's compile check needs it (pip install cmake ninja)")
    return found


def _configure(variant: str, skip: str | None) -> tuple[Path, subprocess.CompletedProcess]:
    root = FAKE_BUILD / variant
    _fake_family_tree(root / "src", skip=skip)
    build = root / "build"
    return build, _cmake_configure(root / "src" / "customops" / "tests", build)


def _cmake_configure(source: Path, build: Path) -> subprocess.CompletedProcess:
    cmd = [_tool("cmake"), "-S", str(source), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}",
           "-DCMAKE_BUILD_TYPE=Release", *ccache_cmake_args()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ccache_env())


def _ninja(build: Path, target: str) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("ninja"), "-C", str(build), "-j2", target], capture_output=True, text=True, timeout=900,
                          env=ccache_env())


@pytest.mark.slow
def test_a_fake_family_by_the_recipe_compiles_and_runs(tmp_path):
    """The recipe's steps, followed in a copy of the tree, give a library whose driver runs the
    fake family: kernel_test finds its kernel by name, checks its rows, its exact sums on the
    generated cases and the driver forced to it (BITNET_ONNX_KERNEL's path) at 1 and 2 threads."""
    build, res = _configure("complete", skip=None)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = _ninja(build, "kernel_test")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    vectors = tmp_path / "vectors"
    res = subprocess.run([sys.executable, str(REPO / "tests" / "kernel_vectors" / "make_kernel_vectors.py"), str(vectors)],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr
    small = [str(vectors / name) for name, macs, _cpus in (line.split() for line in (vectors / "index.txt").read_text().splitlines())
             if int(macs) <= 3_000_000]
    assert len(small) >= 5, small
    res = subprocess.run([str(build / "kernel_test"), "--kernels", "fake-scalar", "--threads", "1,2", "--generated", "small",
                          *small], capture_output=True, text=True, timeout=600)
    lines = res.stdout.strip().splitlines()
    assert res.returncode == 0 and lines[-1].endswith(" 0 failed"), res.stdout[-4000:]
    assert "kernel fake-scalar: ok" in res.stdout, res.stdout[-4000:]
    assert re.search(r"^fake-scalar driver: [1-9]\d* cases at 2 thread counts, 0 measured: ok$", res.stdout, re.M), res.stdout[-4000:]
    res = subprocess.run([str(build / "kernel_test"), "--kernels", "nosuch-scalar", small[0]], capture_output=True, text=True)
    assert res.returncode != 0 and "FAIL select_kernel(nosuch-scalar)" in res.stdout, res.stdout[-2000:]
    _check_fake_family_described(build)


def _describe(build: Path, *forced: str) -> customops.Dispatch:
    """The copy's dispatch description (customops/tests/dispatch_describe: bitnet_onnx_dispatch's text from the
    kernels alone), parsed as the library's is."""
    res = _ninja(build, "dispatch_describe")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    res = subprocess.run([str(build / "dispatch_describe"), *forced], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return customops.dispatch_from_text(res.stdout)


def _check_fake_family_described(build: Path) -> None:
    """The description lists the fake family after the others, with no rules and its scalar reference only, and
    the Python consumers derived from it cover it without edits (test_kernels_native's other-family kernels and
    the kernels its qemu runs share out among the CPU models), and BITNET_ONNX_KERNEL=fake is accepted on scalar
    and refused by name on every other ISA this CPU runs."""
    import test_kernels_native

    described = _describe(build)
    assert [family.name for family in described.families] == [*_table_rows(I2S), FAKE]
    fake = described.family(FAKE)
    assert (fake.order, fake.base, fake.rules) == (len(described.families) - 1, False, ())
    assert {record.name: record.kernels[FAKE] for record in described.isas} == {
        record.name: "fake-scalar" if record.name == "scalar" else None for record in described.isas}
    assert "fake-scalar" in test_kernels_native.family_kernels(described, ["scalar"])
    assert "fake-scalar" in test_kernels_native.running_kernels(described)  # what the qemu runs take their kernels from
    bench_rows = family_variants_of(family.name for family in described.families)
    assert bench_rows[f"i2s-{FAKE}"].env == ((customops.KERNEL_ENV, FAKE),)  # bench --variants i2s-fake
    assert _describe(build, "scalar", FAKE).forced_family == customops.ForcedChoice(FAKE, FAKE, "")
    for record in described.running()[:-1]:  # every ISA this CPU runs but scalar: no fake kernel
        refused = _describe(build, record.name, FAKE).forced_family
        assert refused == customops.ForcedChoice(
            FAKE, None, f"BITNET_ONNX_KERNEL={FAKE}: the {record.name} ISA has no kernel of that family"), refused


def test_a_fake_family_without_its_table_row_is_refused_by_cmake():
    """Step 2 skipped: configuring names the folder and the row it lacks."""
    _, res = _configure("skip-table-row", skip="table row")
    assert res.returncode != 0
    assert "customops/kernels/i2s/fake/ is a kernel family folder without its row X(fake)" in " ".join(
        (res.stdout + res.stderr).split()), res.stderr[-3000:]


def test_a_fake_family_a_row_short_does_not_compile():
    """Step 1's IsaRow array missing an ISA (what a new ISA not added to a family looks like): the
    family's dispatch.cc does not compile."""
    build, res = _configure("skip-isa-row", skip="isa row")
    assert res.returncode == 0, res.stderr[-3000:]
    res = _ninja(build, "i2s_family_fake")
    assert res.returncode != 0 and "fake/dispatch.cc" in res.stdout, res.stdout[-3000:]
    rows = len(_isa_enum(ISA_HEADER))  # KernelFamily binds exactly that many rows
    assert f"(&)[{rows}]" in res.stdout and f"[{rows - 1}]" in res.stdout, res.stdout[-3000:]


# -- Add a kernel ISA, compiled: a fake ISA that no build has (steps 2-4: its Isa value and record,
# its row in every family's IsaRow array), each C++ step skipped in turn ----------------------------

FAKE_ISA_RECORD = '    {kIsaFake, "fake", false, [](const CpuFeatures&) { return false; }, "nothing (a test ISA)"},\n'
# Each skippable step -> (the object whose compile must fail, from the build folder; its source).
FAKE_ISA_STEPS = {
    "isa record": ("kernels/CMakeFiles/kernel_isas.dir/isa.cc.o", "kernels/isa.cc"),
    "mul row": ("kernels/i2s/mul/CMakeFiles/i2s_family_mul.dir/dispatch.cc.o", "kernels/i2s/mul/dispatch.cc"),
    "lut row": ("kernels/i2s/lut/CMakeFiles/i2s_family_lut.dir/dispatch.cc.o", "kernels/i2s/lut/dispatch.cc"),
    "attention row": ("kernels/attention/CMakeFiles/attention_kernels.dir/dispatch.cc.o", "kernels/attention/dispatch.cc"),
}


def _configure_fake_isa(variant: str, skip: str | None) -> Path:
    root = FAKE_BUILD / variant
    src = root / "src"
    wanted = _kernel_sources(src)
    kernels = src / "customops" / "kernels"
    isa_h = kernels / "isa.h"
    wanted[isa_h] = wanted[isa_h].replace(b"  kIsaScalar, kIsaCount", b"  kIsaFake, kIsaScalar, kIsaCount")
    if skip != "isa record":
        isa_cc = kernels / "isa.cc"
        wanted[isa_cc] = wanted[isa_cc].replace(b'    {kIsaScalar, "scalar"', FAKE_ISA_RECORD.encode() + b'    {kIsaScalar, "scalar"')
    skipped = src / "customops" / FAKE_ISA_STEPS[skip][1] if skip and skip != "isa record" else None
    tables = [path for path, data in wanted.items() if b"    /*kIsaScalar=*/" in data]  # every family's IsaRow array
    assert len(tables) >= 3 and (skipped is None or skipped in tables), tables
    for path in tables:
        if path != skipped:
            wanted[path] = wanted[path].replace(b"    /*kIsaScalar=*/", b"    /*kIsaFake=*/nullptr,\n    /*kIsaScalar=*/")
    _sync(src, wanted)
    build = root / "build"
    res = _cmake_configure(src / "customops" / "tests", build)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return build


@pytest.mark.slow
def test_a_fake_isa_by_the_recipe_compiles():
    """Steps 2-4 followed for an ISA no build has: everything compiles, the table lists it as not
    built, and kernel_test's row checks (every family: no kernel where the ISA is not built) pass."""
    build = _configure_fake_isa("isa-complete", skip=None)
    res = _ninja(build, "kernel_test")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    res = _ninja(build, "attention_kernel_test")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    exe = str(build / "kernel_test")
    listed = subprocess.run([exe, "--list-kernels"], capture_output=True, text=True).stdout.splitlines()
    assert [row.split("\t")[0] for row in listed][-2:] == ["fake", "scalar"], listed
    assert listed[-2].split("\t")[1:3] == ["0", "0"], listed[-2]
    res = subprocess.run([exe, "--kernels", "scalar,lut-scalar", "--generated", "small"], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0 and res.stdout.strip().endswith(" 0 failed"), res.stdout[-3000:]
    assert "family lut row fake" not in res.stdout and "FAIL" not in res.stdout, res.stdout[-3000:]
    described = _describe(build, "fake")
    assert described.isa_names()[-2:] == ["fake", "scalar"]
    fake = described.isa("fake")
    assert (fake.built, fake.runs, fake.needs) == (False, False, "nothing (a test ISA)")
    assert set(fake.kernels.values()) == {None} and fake.attention == customops.AttentionTiles(None, None, None, {})
    assert described.forced_isa.picks is None and described.forced_isa.error.startswith("BITNET_ONNX_ISA=fake: this CPU "
                                                                                         "lacks fake")


@pytest.mark.parametrize("step", list(FAKE_ISA_STEPS))
def test_a_fake_isa_missing_a_step_does_not_compile(step):
    """Each C++ step of the ISA recipe skipped: the file that step edits fails to compile, by name."""
    build = _configure_fake_isa(f"isa-skip-{step.replace(' ', '-')}", skip=step)
    target, source = FAKE_ISA_STEPS[step]
    res = _ninja(build, target)
    assert res.returncode != 0 and re.search(rf"customops/{source}:\d+:\d+: error", res.stdout), res.stdout[-3000:]


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
