"""Estimate: the aarch64 kernels' inner loops on Neoverse cores, by llvm-mca (no aarch64 hardware here).

Compiles the real kernel files (customops/kernels/i2s/mul/neon*.cc, customops/kernels/i2s/lut/lut_neon.cc)
to assembly with the aarch64 compiler and their own -march flags, finds each path's innermost loop
in it (the shortest backward-branch region holding its signature instruction; of several template
instances, the one with the most), and asks llvm-mca for its steady-state cycles per iteration on
each CPU model. Beside them, an SMMLA int8 x int8 loop of the shape MLAS's int8 GEMM uses where the
CPU has i8mm (an 8 x 8 output tile: 4 row pairs of A x 4 column pairs of B, 16 accumulators, both
operands int8 and pre-packed), written here from that idea.

Loops and the weight-MACs one iteration does (a weight times an activation, added):
  neon            plain NEON direct path: smlal/smlal2, 8 MACs each (codes decoded in registers)
  dotprod-direct  SDOT with codes decoded in registers (fewer than 8 tokens): 16 MACs per sdot
  dotprod-panel   SDOT over the L1 panel (8 tokens on): 16 MACs per sdot
  i8mm-panel      SMMLA over the L1 panel (4 tokens on): 32 MACs per smmla
  unpack-rows     decoding the 2-bit codes into dotprod's panel: int8 weights stored per cycle
  unpack-pairs    the same into i8mm's row-pair panel
  lookup          lut-neon's sweep: per entry add (add .8h) 8 tokens x 4 weights = 32 MACs
  mlas-smmla      the MLAS-shaped SMMLA loop: 32 MACs per smmla

Usage: python benchmarks/mca_neon_loops.py [--cpus neoverse-n1,neoverse-n2,neoverse-v1,neoverse-v2]
                                           [--cxx aarch64-linux-gnu-g++] [--mca llvm-mca-19]
Prints a markdown table (MACs per cycle; "-" where the core lacks the instruction: N1 has no i8mm)
and the tool versions. These are llvm-mca's scheduling models, not measurements: no cache misses,
no front-end limits beyond the model's, loop-carried register copies as the compiler left them.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "customops" / "kernels"
# What a family's files may include (customops/kernels/i2s/CMakeLists.txt's i2s_family): kernels/, the seam
# (kernels/i2s) and the file's own folder, added per file in _compile.
INCLUDES = [KERNELS, KERNELS / "i2s"]
CPUS = ["neoverse-n1", "neoverse-n2", "neoverse-v1", "neoverse-v2"]
I8MM_CPUS = {"neoverse-n2", "neoverse-v1", "neoverse-v2"}  # Arm's cores with FEAT_I8MM of these
BRANCH = re.compile(r"^\s*(?:b\.\w+|b\w\w|cbn?z|tbn?z)\s+(?:[wx]\d+,\s*)?(?:#\d+,\s*)?(\.L\w+)\s*$")

# The MLAS-shaped SMMLA loop (written from the idea, not from MLAS): A packed as [k/8][4 row pairs][16 B],
# B as [k/8][4 column pairs][16 B]; every 8 values of k, 4 + 4 loads and 16 SMMLA into an 8 x 8 tile.
MLAS_SHAPE = r"""
#include <arm_neon.h>
#include <cstdint>
extern "C" void mlas_shape_smmla(const int8_t* a, const int8_t* b, int64_t k8, int32_t* c) {
  int32x4_t acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = vdupq_n_s32(0);
  for (int64_t s = 0; s < k8; ++s) {
    int8x16_t av[4], bv[4];
    for (int i = 0; i < 4; ++i) av[i] = vld1q_s8(a + (s * 4 + i) * 16);
    for (int j = 0; j < 4; ++j) bv[j] = vld1q_s8(b + (s * 4 + j) * 16);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = vmmlaq_s32(acc[i][j], av[i], bv[j]);
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) vst1q_s32(c + (i * 4 + j) * 4, acc[i][j]);
}
"""


@dataclass(frozen=True)
class Loop:
    name: str
    source: str          # a kernel file under customops/kernels, or "mlas" for MLAS_SHAPE
    signature: str       # regex of the instruction that does the work
    work: dict           # instruction regex -> weight-MACs (or weights stored) per instruction
    needs_i8mm: bool = False
    without: str = ""    # regex an instruction of the loop must not match (to tell loops apart)
    decodes: bool = False  # the loop must also decode codes in registers (DECODE)

    @property
    def march(self) -> str:
        """The -march its code is compiled with: the kernel file's own, as the library builds it; MLAS_SHAPE's, i8mm."""
        return MLAS_MARCH if self.source == "mlas" else kernel_march(self.source)


def kernel_march(source: str) -> str:
    """The -march the library compiles a kernel file with: the flags of its ``i2s_isa_kernel(<file> <flags>)`` line in
    its folder's CMakeLists.txt (the one place that states them); plain armv8-a where it gives none."""
    path = KERNELS / source
    cmake = path.parent / "CMakeLists.txt"
    found = re.search(rf"i2s_isa_kernel\({re.escape(path.name)}\b([^)]*)\)", cmake.read_text())
    if found is None:
        sys.exit(f"mca_neon_loops: no i2s_isa_kernel({path.name} ...) in {cmake}")
    return next((flag.removeprefix("-march=") for flag in found.group(1).split() if flag.startswith("-march=")),
                "armv8-a")


DECODE = r"\b(ushr|ushl)\s+v"  # the 2-bit field shifts of the decode
# int8 weights stored (to the panel, not register spills to the stack)
STORES = {r"^str\s+q\d+, \[(?!sp)": 16, r"^stp\s+q\d+, q\d+, \[(?!sp)": 32, r"^st1\s.*\[(?!sp)": 16}
MLAS_MARCH = "armv8.2-a+dotprod+i8mm"
LOOPS = [
    Loop("neon", "i2s/mul/neon.cc", r"\bsmlal2?\b", {r"\bsmlal2?\b": 8}),
    Loop("dotprod-direct", "i2s/mul/neon_dotprod.cc", r"\bsdot\b", {r"\bsdot\b": 16}, decodes=True),
    Loop("dotprod-panel", "i2s/mul/neon_dotprod.cc", r"\bsdot\b", {r"\bsdot\b": 16}, without=DECODE),
    Loop("i8mm-panel", "i2s/mul/neon_i8mm.cc", r"\bsmmla\b", {r"\bsmmla\b": 32}, needs_i8mm=True),
    Loop("unpack-rows", "i2s/mul/neon_dotprod.cc", DECODE, STORES, without=r"\bsdot\b"),
    Loop("unpack-pairs", "i2s/mul/neon_i8mm.cc", r"\bzip[12]\s+v\d+\.2d", STORES, without=r"\b(sdot|smmla)\b"),
    Loop("lookup", "i2s/lut/lut_neon.cc", r"\badd\s+v\d+\.8h", {r"\badd\s+v\d+\.8h": 32}),
    Loop("mlas-smmla", "mlas", r"\bsmmla\b", {r"\bsmmla\b": 32}, needs_i8mm=True),
]


def _compile(cxx: str, loop: Loop, tmp: Path) -> list[str]:
    if loop.source == "mlas":
        src = tmp / "mlas_shape.cc"
        src.write_text(MLAS_SHAPE)
    else:
        src = KERNELS / loop.source
    out = tmp / (src.stem + "-" + loop.march.replace("+", "_") + ".s")
    cmd = [cxx, "-std=c++17", "-O3", "-ffp-contract=off", f"-march={loop.march}",
           *(f"-I{p}" for p in [*INCLUDES, src.parent]),
           "-S", str(src), "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"mca_neon_loops: {' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    return out.read_text().splitlines()


def _instructions(lines: list[str]) -> list[str]:
    """The instruction lines of a region (no labels, directives or comments)."""
    out = []
    for line in lines:
        s = line.split("//")[0].strip()
        if s and not s.endswith(":") and not s.startswith("."):
            out.append(s)
    return out


def innermost_loop(asm: list[str], loop: Loop) -> list[str]:
    """The backward-branch region holding the signature: of the innermost ones (no smaller
    region inside holding it), the one with the most signature instructions."""
    labels = {line.strip()[:-1]: i for i, line in enumerate(asm) if re.match(r"^\.L\w+:$", line.strip())}
    regions = []
    for j, line in enumerate(asm):
        m = BRANCH.match(line)
        if m and m.group(1) in labels and labels[m.group(1)] < j:
            body = _instructions(asm[labels[m.group(1)] + 1: j + 1])
            if any(re.search(loop.signature, s) for s in body) and not (
                    loop.without and any(re.search(loop.without, s) for s in body)):
                regions.append((labels[m.group(1)], j, body))
    if not regions:
        sys.exit(f"mca_neon_loops: no loop with {loop.signature} in {loop.source}")
    if loop.decodes:
        regions = [r for r in regions if any(re.search(DECODE, s) for s in r[2])]
    inner = [r for r in regions if not any(o is not r and r[0] <= o[0] and o[1] <= r[1] for o in regions)]
    # Prefer branch-free bodies (the steady state, not a tail's dispatch).
    inner = [r for r in inner if sum(bool(BRANCH.match(s)) or s.startswith(("b ", "ret")) for s in r[2]) == 1] or inner
    count = lambda r: sum(bool(re.search(loop.signature, s)) for s in r[2])  # noqa: E731
    return max(inner, key=lambda r: (count(r), -len(r[2])))[2]


def work_per_iteration(body: list[str], loop: Loop) -> int:
    return sum(w for s in body for rx, w in loop.work.items() if re.search(rx, s))


def cycles_per_iteration(mca: str, cpu: str, body: list[str], march: str, iterations: int = 200) -> float:
    attrs = "+neon" + ("+dotprod" if "dotprod" in march else "") + ("+i8mm" if "i8mm" in march else "")
    cmd = [mca, "-mtriple=aarch64-linux-gnu", f"-mcpu={cpu}", f"-mattr={attrs.replace('+', ',+')[1:]}",
           f"-iterations={iterations}"]
    res = subprocess.run(cmd, input="\n".join(body) + "\n", capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"mca_neon_loops: {' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    total = int(re.search(r"^Total Cycles:\s+(\d+)", res.stdout, re.M).group(1))
    return total / iterations


def _version(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpus", default=",".join(CPUS), help="llvm-mca -mcpu models (default: %(default)s)")
    p.add_argument("--cxx", default=shutil.which("aarch64-linux-gnu-g++") or "g++",
                   help="aarch64 C++ compiler (default: %(default)s)")
    p.add_argument("--mca", default=shutil.which("llvm-mca-19") or shutil.which("llvm-mca") or "llvm-mca",
                   help="llvm-mca with the Neoverse models (default: %(default)s)")
    args = p.parse_args(argv)
    cpus = args.cpus.split(",")
    for tool in (args.cxx, args.mca):
        if not shutil.which(tool):
            sys.exit(f"mca_neon_loops: {tool} not found (apt-get install g++-aarch64-linux-gnu llvm-19)")
    print(f"# estimate (llvm-mca scheduling models, not a measurement): {_version([args.mca, '--version'])}")
    print(f"# compiler: {_version([args.cxx, '--version'])}; kernels compiled -O3 with each path's -march")
    print("| loop | instructions / iteration | work / iteration | " + " | ".join(cpus) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in cpus) + " |")
    with tempfile.TemporaryDirectory() as tmp:
        for loop in LOOPS:
            body = innermost_loop(_compile(args.cxx, loop, Path(tmp)), loop)
            work = work_per_iteration(body, loop)
            unit = "weights stored" if loop.work is STORES else "MACs"
            cells = []
            for cpu in cpus:
                if loop.needs_i8mm and cpu not in I8MM_CPUS:
                    cells.append("-")
                    continue
                cells.append(f"{work / cycles_per_iteration(args.mca, cpu, body, loop.march):.1f}")
            print(f"| {loop.name} | {len(body)} | {work} {unit} | " + " | ".join(cells) + " |")
    print("# cells: weight-MACs per cycle per core (unpack-*: int8 weights decoded and stored per cycle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
