"""Which kernel paths this CPU runs, read from /proc/cpuinfo (dispatch.cc checks the same through
CPUID/HWCAP; tests compare the two so the library never hides a path the CPU has)."""

import platform
from pathlib import Path

_AVX512 = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}

# kernel -> the /proc/cpuinfo flags it needs, per machine
ISA_FLAGS = {
    "x86_64": {
        "avx2": {"avx2", "fma", "f16c"},
        "avxvnni": {"avx2", "fma", "f16c", "avx_vnni"},
        "avx512vnni": _AVX512,
        "amx": _AVX512 | {"amx_tile", "amx_int8"},
    },
    "aarch64": {"neon": {"asimd"}},
}
ALL_ISAS = ["scalar", "avx2", "avxvnni", "avx512vnni", "amx", "neon"]


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
