"""Which kernel paths this CPU runs, read from /proc/cpuinfo (the library checks the same through
CPUID/HWCAP; tests compare the two so the library never hides a path the CPU has).

The kernel names themselves come from their one list, the ISA table of customops/kernels/isa.cc,
as the op library exports it (bitnet_onnx.customops.library_kernels)."""

import platform
from pathlib import Path

from bitnet_onnx.customops import library_kernels

_AVX512 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}

# kernel -> the /proc/cpuinfo flags it needs, per machine
ISA_FLAGS = {
    "x86_64": {
        "avx2": {"avx2", "fma", "f16c"},
        "avxvnni": {"avx2", "fma", "f16c", "avx_vnni"},
        "avx512vnni": _AVX512,
        "amx": _AVX512 | {"amx_tile", "amx_int8"},
    },
    "aarch64": {"neon": {"asimd"}, "dotprod": {"asimd", "asimddp"}, "i8mm": {"asimd", "asimddp", "i8mm"}},
}


ALL_ISAS = [isa.name for isa in library_kernels()]  # best first
assert "scalar" in ALL_ISAS and all(isa in ALL_ISAS for table in ISA_FLAGS.values() for isa in table), ALL_ISAS


def cpu_flags() -> set[str]:
    flags: set[str] = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return flags


def isas_of_this_cpu() -> list[str]:
    """scalar plus every kernel whose ISA this CPU has, best last."""
    flags = cpu_flags()
    table = ISA_FLAGS.get(platform.machine(), {})
    return ["scalar"] + [isa for isa, need in table.items() if need <= flags]
