"""Facts about this machine and process, for benchmark headers and memory columns."""

from __future__ import annotations

import platform
import sys
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name, for benchmark headers."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
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
