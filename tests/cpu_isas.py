"""THE declared oracle of what each kernel ISA and attention tile path needs of the CPU, read from
/proc/cpuinfo: an independent check of the library's own choice (CPUID/HWCAP, customops/kernels/cpu_features.cc).
Tests compare the two so the library never hides a path the CPU has nor claims one it lacks.

Everything else about the dispatch (which kernel each family runs on an ISA, which attention tiles, the
families) comes from the library itself (bitnet_onnx.customops.dispatch, built from its C++ tables); the
names come from their one list, the ISA table of customops/kernels/isa.cc."""

from __future__ import annotations

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

# the co-issued kernel's GFNI build (customops/kernels/i2s/mixed/avx512vnni_gfni.cc), which its dispatch runs in
# place of the plain one on a CPU with these flags
MIXED_GFNI_FLAGS = _AVX512 | {"gfni"}


# qemu-aarch64 CPU models (the wheel's and the kernels' emulated runs) -> the /proc/cpuinfo flags each has:
# -cpu max has dotprod and i8mm, neoverse-n1 dotprod only, cortex-a72 neither
QEMU_CPU_FLAGS = {"max": {"asimd", "asimddp", "i8mm"}, "neoverse-n1": {"asimd", "asimddp"}, "cortex-a72": {"asimd"}}

# attention tile ops (customops/kernels/attention: TileOps and Bf16TileOps names) -> the flags they need, on x86-64;
# the scalar tiles need nothing, and aarch64 has no attention tiles of its own
ATTENTION_TILE_FLAGS = {
    "x86_64": {
        "avx2": {"avx2", "fma"},
        "avx512": {"avx512f", "fma"},
        "avx512bf16": {"avx512f", "avx512_bf16"},
        "amxbf16": {"avx512f", "amx_tile", "amx_bf16"},
    },
    "aarch64": {},
}

# bf16 attention tiles -> the CPU classes (/proc/cpuinfo "vendor_id", "cpu family"; None: any) where precision
# "auto" runs them, measured faster than the f32 tiles there (docs/attention.md, "Precision")
AUTO_BF16_CLASSES = {"amxbf16": None, "avx512bf16": {("AuthenticAMD", 25)}}  # AMD Zen 4

ALL_ISAS = [isa.name for isa in library_kernels()]  # best first
assert "scalar" in ALL_ISAS and all(isa in ALL_ISAS for table in ISA_FLAGS.values() for isa in table), ALL_ISAS


def _cpuinfo_first(*keys: str) -> dict[str, str]:
    """The first value of each of these /proc/cpuinfo keys ("" where absent): the one reader of the file."""
    found: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            found.setdefault(key.strip(), value.strip())
    return {key: found.get(key, "") for key in keys}


def cpu_flags() -> set[str]:
    fields = _cpuinfo_first("flags", "Features")  # x86-64, aarch64
    return set(fields["flags"].split()) | set(fields["Features"].split())


def cpu_class() -> tuple[str, int]:
    """(vendor_id, cpu family) of /proc/cpuinfo's first processor; ("", 0) where it has none (aarch64)."""
    fields = _cpuinfo_first("vendor_id", "cpu family")
    family = fields["cpu family"]
    return fields["vendor_id"], int(family) if family.isdigit() else 0


def auto_runs_bf16(bf16_tiles: str | None) -> bool:
    """Whether precision auto runs these bf16 tiles (None: none) on this CPU, by AUTO_BF16_CLASSES."""
    if bf16_tiles not in AUTO_BF16_CLASSES:
        return False
    classes = AUTO_BF16_CLASSES[bf16_tiles]
    return classes is None or cpu_class() in classes


def isas_of_this_cpu() -> list[str]:
    """scalar plus every kernel whose ISA this CPU has, best last."""
    flags = cpu_flags()
    table = ISA_FLAGS.get(platform.machine(), {})
    return ["scalar"] + [isa for isa, need in table.items() if need <= flags]


def oracle_pick(forced: str) -> str | None:
    """The ISA the library must run with BITNET_ONNX_ISA=forced by this oracle: unset (""), the best one of the
    table (best first) this CPU has the flags of; else the forced one where it has them, None where not."""
    running = isas_of_this_cpu()
    if not forced:
        return next(isa for isa in ALL_ISAS if isa in running)
    return forced if forced in running else None


def attention_tiles_of_this_cpu() -> set[str]:
    """scalar plus every attention tile path whose flags this CPU has."""
    flags = cpu_flags()
    table = ATTENTION_TILE_FLAGS.get(platform.machine(), {})
    return {"scalar"} | {path for path, need in table.items() if need <= flags}


def best_isa_of(machine: str, flags: set[str]) -> str:
    """The best ISA of the table (best first) a CPU of `machine` with these /proc/cpuinfo flags runs, by this
    oracle (scalar where it has none)."""
    table = ISA_FLAGS[machine]
    return next((isa for isa in ALL_ISAS if isa in table and table[isa] <= flags), "scalar")
