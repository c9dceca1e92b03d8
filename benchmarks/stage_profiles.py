"""What the kernel stage profilers share (amx_profile.py, panel_profile.py): building their programs of
customops/tests/ (the kernel's own source compiled with its stage switches) and reading their output.

A program prints free lines (its header: the kernel, a peak it measured, `name=value` facts) and one line per (K, N, M):
`K=<k> N=<n> M=<m> field=value ...` (times in microseconds, counters), plus bare words for flags
("direct"). Not a benchmark of its own: run one of the scripts above.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_op import MODELS  # noqa: E402 - the layers' projections, bench_op.py's

REPO = Path(__file__).resolve().parents[1]
CELL = re.compile(r"K=(\d+) N=(\d+) M=(\d+) (.*)")


def arguments(doc: str) -> argparse.ArgumentParser:
    """The arguments every stage profiler takes (a script adds its own)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--m", type=int, nargs="+", default=[16, 128, 512, 2048])
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions (default 7); the median is kept")
    parser.add_argument("--min-seconds", type=float, default=0.05, help="per timed sample (default 0.05)")
    parser.add_argument("--build", type=Path, help="CMake build folder (default: under the temp folder, per checkout)")
    return parser


def shapes_of(models: list[str]) -> list[tuple[int, int]]:
    """The distinct (K, N) of the models' projections."""
    return sorted({(k, n) for model in models for _, k, n in MODELS[model]})


def default_build_folder(name: str) -> Path:
    """The CMake build folder of one profiler, under the temp folder, per checkout."""
    return Path(tempfile.gettempdir()) / f"bitnet_onnx_{name}-{hashlib.sha256(str(REPO).encode()).hexdigest()[:12]}"


def build(folder: Path, targets: list[str]) -> Path:
    """Configures customops/tests in `folder` and builds `targets`; returns the folder of the executables."""
    cmake, ninja = shutil.which("cmake", path=_tool_path()), shutil.which("ninja", path=_tool_path())
    if not cmake or not ninja:
        sys.exit("cmake and ninja are needed (pip install cmake ninja)")
    for cmd in ([cmake, "-S", str(REPO / "customops" / "tests"), "-B", str(folder), "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release"],
                [ninja, "-C", str(folder), *targets]):
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return folder


def panel_isas(folder: Path) -> list[str]:
    """The ISAs with a panel_profile_<isa> program in a build of the target panel_profiles, widest first (the
    kernels' list I2S_PANEL_ISAS, customops/kernels/i2s/CMakeLists.txt, as the build wrote it)."""
    return (folder / "panel_profile_isas.txt").read_text().strip().split(";")


def _tool_path() -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def run(exe: Path, shapes: list[tuple[int, int]], ms: list[int], reps: int, min_seconds: float,
        check: bool = True, mode: tuple[str, ...] = ()) -> tuple[list[str], dict, subprocess.CompletedProcess]:
    """(the program's free lines, {(k, n, m): {field: value, flag: True}}, the process) of one run (`mode`: the
    program's own leading flags, e.g. mixed_profile's --splits); exits on failure when `check`."""
    cmd = [str(exe), *mode, "--shapes", ",".join(f"{k}x{n}" for k, n in shapes), "--m", ",".join(map(str, ms)),
           "--reps", str(reps), "--min-seconds", str(min_seconds)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if check and res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    free, cells = [], {}
    for line in res.stdout.splitlines():
        if (match := CELL.match(line)):
            k, n, m = map(int, match.groups()[:3])
            cells[(k, n, m)] = {key: float(value) if sep else True
                                for key, sep, value in (f.partition("=") for f in match.group(4).split())}
        else:
            free.append(line)
    return free, cells, res
