"""Facts about this machine and process, for benchmark headers and memory columns."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path


# Arm Ltd. (implementer 0x41) server cores by "CPU part", for aarch64's /proc/cpuinfo, which has no
# model name line.
ARM_PARTS = {"0xd0c": "Neoverse N1", "0xd49": "Neoverse N2", "0xd40": "Neoverse V1", "0xd4f": "Neoverse V2",
             "0xd8e": "Neoverse N3", "0xd84": "Neoverse V3"}


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name, for benchmark headers (aarch64: the core's name from its part number)."""
    try:
        fields = dict(line.split(":", 1) for line in cpuinfo.read_text().splitlines() if ":" in line)
    except OSError:
        fields = {}
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    if "model name" in fields:
        return fields["model name"]
    if "CPU part" in fields:
        implementer, part = fields.get("CPU implementer", "?"), fields["CPU part"]
        name = ARM_PARTS.get(part) if implementer == "0x41" else None
        return name or f"{platform.machine()} (CPU implementer {implementer}, part {part})"
    return platform.processor() or platform.machine()


def peak_rss_bytes() -> int:
    """This process's peak RSS: VmHWM (per address space, reset by exec; ru_maxrss would carry over
    the parent's peak on Linux), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def available_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """What the system can give new allocations without swapping: MemAvailable (Linux), else free
    physical pages; None where neither is known."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
