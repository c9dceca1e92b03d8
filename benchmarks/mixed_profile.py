"""Where the co-issued kernel's time goes (issue 40): mixed-avx512vnni, stage by stage, on one thread.

Builds customops/tests/mixed_profile.cc, one program per build of the kernel (CMake target mixed_profiles:
mixed_profile, i2s/mixed/avx512vnni.cc; mixed_profile_gfni, avx512vnni_gfni.cc: the multiply rows' codes cut
out by GFNI, what the op runs on a CPU with GFNI), each compiled with its file's flags and the kernel's stage
switches, and runs each this CPU runs on the 7 projections of one layer of each model of bench_op.py (MODELS),
then sums the projections per (build, model, M), as bench_op.py's rows do. A stage's cost is what it adds to
the call: the whole call's time minus the call's time with that stage left out (CPU time of the thread, median
of interleaved repetitions), so the stages' costs need not add up to the whole when they overlap ("overlap":
the whole minus their sum and "loops"). Columns, in % of the whole call unless named:
  % peak      GOP/s (2*M*K*N) over the co-issue register peak (benchmarks/register_peaks.c's loop of this
              kernel: vpdpbusd zmm and lookups in one loop, 4 vpdpbusd per lookup)
  at rates    the call's vpdpbusd and lookups timed at their own register loops' rates (avx512vnni,
              lut-avx512), one after the other: near 100 the two halves barely overlap; the two loops
              co-issued would take max() of the two, `co-issued`
  quantize    the activations' absmax int8 quantization (the fused norm is off, as in bench_op.py)
  gathers     each token block's activation dwords of a K block (vpgatherdd)
  tables      the K block's 8 lookup tables of 81 entries, built from those dwords
  multiplies  the vpdpbusd rows: their codes (a shift and a mask, or GFNI) and vpdpbusd
  lookups     the lookup rows: table offsets, entry loads and vpaddw
  widen       the lookup rows' int16 sums to int32, every 7 K blocks
  emit        the int32 sums to (float(sum) / a) * s_w into Y, transposed to token rows
  prefetch    the output lines fetched for writing before each chunk's last sweep (< 0: a saving)
  loops       the call with every stage above left out (the rows' sums loaded and stored per K block, the
              loops, the jobs)

    python benchmarks/mixed_profile.py                          # the builds this CPU runs, both models
    python benchmarks/mixed_profile.py --models qwen3 --m 512 --reps 5

--splits: the split search instead. The kernel's split (of every step's rows, how many run on vpdpbusd and how
many on lookups; i2s/mixed/avx512vnni_kernel.h) is a compile-time constant; the build the library runs on this CPU
times its own split ("full") and the same source instantiated at every other split of mixed_profile.cc's kSplits,
each checked bit for bit against the library and timed whole, interleaved. One row per model and M over the sum
of its 7 projections: the library's split's time, then each split's time over it (> 1: slower).

    python benchmarks/mixed_profile.py --splits --m 128 512 2048
"""

from __future__ import annotations

import datetime
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stage_profiles  # noqa: E402
from bench_op import OP_NAME, run_peak_loop  # noqa: E402
from stage_profiles import MODELS  # noqa: E402

from bitnet_onnx.bench.host import cpu_name  # noqa: E402

BUILDS = {"mixed_profile": "shift+mask", "mixed_profile_gfni": "gfni"}  # program -> the build's name in the table
STAGES = ["quantize", "gathers", "tables", "multiplies", "lookups", "widen", "emit", "prefetch"]
NOT_RUN_HERE = 3  # mixed_profile's exit code where this CPU does not run the build


def table(build: str, model: str, peaks: dict[str, float], cells: dict, ms: list[int]) -> list[str]:
    """The rows of one build and model, one per M, over the sum of its 7 projections."""
    rows = []
    for m in ms:
        projections = [cells[(k, n, m)] for _, k, n in MODELS[model]]
        total = lambda field: sum(c[field] for c in projections)  # noqa: E731 - summed over projections
        full = total("full")
        gops = 2 * m * sum(k * n for _, k, n in MODELS[model]) / full / 1e3
        dpbusd_us = 2 * total("mul_macs") / (peaks["avx512vnni"] * 1e3)  # 2 ops per multiply-add
        lookups_us = 2 * total("lookup_macs") / (peaks["lut-avx512"] * 1e3)
        costs = {stage: full - total(f"-{stage}") for stage in STAGES}
        overlap = full - sum(costs.values()) - total("loops")
        pct = lambda us: f"{100 * us / full:.0f}"  # noqa: E731
        rows.append(f"| {build} | {model} | {m} | {full / 1e3:.3f} | {gops:.0f} | "
                    f"{100 * gops / peaks['mixed-avx512vnni']:.0f} | {pct(dpbusd_us + lookups_us)} | "
                    f"{pct(max(dpbusd_us, lookups_us))} | " + " | ".join(pct(costs[s]) for s in STAGES)
                    + f" | {pct(total('loops'))} | {pct(overlap)} |")
    return rows


def split_table(model: str, cells: dict, ms: list[int]) -> list[str]:
    """The split search's rows of one model, one per M, over the sum of its 7 projections."""
    rows = []
    for m in ms:
        projections = [cells[(k, n, m)] for _, k, n in MODELS[model]]
        full = sum(c["full"] for c in projections)
        ratios = [f"{sum(c[split] for c in projections) / full:.3f}" for split in splits_of(cells)]
        rows.append(f"| {model} | {m} | {full / 1e3:.3f} | " + " | ".join(ratios) + " |")
    return rows


def splits_of(cells: dict) -> list[str]:
    """The other splits a --splits run timed (its fields `split_<a>:<b>`), in the program's order."""
    return [field for field in next(iter(cells.values())) if field.startswith("split_")]


def search_splits(args, folder: Path) -> int:
    """--splits: the build the library runs here (GFNI where the CPU has it), its split against the others."""
    for program, build in reversed(BUILDS.items()):
        free, cells, res = stage_profiles.run(folder / program, stage_profiles.shapes_of(args.models), args.m,
                                              args.reps, args.min_seconds, check=False, mode=("--splits",))
        if res.returncode != NOT_RUN_HERE:
            break
    if res.returncode != 0:
        sys.exit(f"{program} --splits failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    print(f"# build: {build} | {free[0]}")
    splits = [split.removeprefix("split_") for split in splits_of(cells)]
    print("| model | M | ms (library's split) | " + " | ".join(splits) + " |")
    print("|---|---|---|" + "---|" * len(splits))
    print("\n".join(row for model in args.models for row in split_table(model, cells, args.m)))
    return 0


def main() -> int:
    parser = stage_profiles.arguments(__doc__)
    parser.add_argument("--splits", action="store_true", help="the split search instead of the stages")
    args = parser.parse_args()
    if platform.machine() not in ("x86_64", "AMD64"):
        sys.exit("mixed_profile: x86-64 only (the co-issued kernel is an AVX512-VNNI kernel)")
    folder = stage_profiles.build(args.build or stage_profiles.default_build_folder("mixed_profile"), ["mixed_profiles"])
    shapes = stage_profiles.shapes_of(args.models)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    what = "splits" if args.splits else "stages"
    print(f"# co-issued kernel's {what}, 1 thread, CPU time | CPU: {cpu_name()} | {date}")
    print(f"# {args.reps} interleaved repetitions, median | command: python {' '.join(sys.argv)}")
    if args.splits:
        return search_splits(args, folder)
    rows, notes, peaks = [], [], {}
    for program, build in BUILDS.items():
        _, cells, res = stage_profiles.run(folder / program, shapes, args.m, args.reps, args.min_seconds, check=False)
        if res.returncode == NOT_RUN_HERE:
            notes.append(f"# {build}: not run here ({res.stderr.strip()})")
            continue
        if res.returncode != 0:
            sys.exit(f"{program} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
        for name in ("mixed-avx512vnni", "avx512vnni", "lut-avx512"):
            if name not in peaks:
                peaks[name], what = run_peak_loop(OP_NAME, name)
                if peaks[name] is None:
                    sys.exit(f"mixed_profile: no register peak for {name}: {what}")
                notes.append(f"# peak {name}: {peaks[name]:.0f} GOP/s ({what})")
        rows += [row for model in args.models for row in table(build, model, peaks, cells, args.m)]
    print("\n".join(notes))
    print("| build | model | M | ms | GOP/s | % peak | at rates | co-issued | " + " | ".join(STAGES) + " | loops | overlap |")
    print("|---|---|---|---|---|---|---|---|" + "---|" * (len(STAGES) + 2))
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
