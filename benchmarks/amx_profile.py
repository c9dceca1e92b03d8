"""Where the AMX path's time goes (issue 40): the amx kernel's stages on one thread, per model and M.

Builds customops/tests/amx_profile.cc (CMake target amx_profile, beside kernel_bench; it compiles the
kernel's own source with its stage switches bound to the profiler) and runs it on the 7 projections
of one layer of each model of bench_op.py (MODELS), then sums the projections per (model, M), as
bench_op.py's rows do. A stage's cost is what it adds to the call: the whole call's time minus the
call's time with that stage left out (CPU time of the thread, median of interleaved repetitions),
so the stages' costs need not add up to the whole when they overlap ("overlap" column: the whole
minus their sum). Columns, in % of the whole call:
  tdp@peak   the call's tdpbssd count at the register peak measured by the profiler (its share of
             peak); the rest of "tiles" is tile loads, stalls on their data and C tiles in and out
  quantize   the activations' absmax int8 quantization (the fused norm is off, as in bench_op.py)
  decode     2-bit weight codes to int8 B tiles; "decoded" = bytes decoded per call / whole W in int8
  pack       token rows to contiguous A tiles
  tiles      tile loads and tdpbssd
  epilogue   int32 C to (float(sum) / a) * s_w into Y
  loops      the call with every stage above left out (tile configuration, loop and job overhead)

    python benchmarks/amx_profile.py                     # both models, M 16 128 512 2048
    python benchmarks/amx_profile.py --models qwen3 --m 512 --reps 5
"""

from __future__ import annotations

import datetime
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stage_profiles  # noqa: E402
from stage_profiles import MODELS  # noqa: E402

from bitnet_onnx.bench.host import cpu_name  # noqa: E402

STAGES = ["quantize", "decode", "pack", "tiles", "epilogue"]


def run(exe: Path, shapes: list[tuple[int, int]], ms: list[int], reps: int, min_seconds: float):
    """(peak GOP/s, {(k, n, m): {field: value}}) from one run of the profiler."""
    free, cells, _ = stage_profiles.run(exe, shapes, ms, reps, min_seconds)
    peak = next(float(line.split()[2]) for line in free if line.startswith("peak tdpbssd"))
    return peak, cells


def table(model: str, peak: float, cells: dict, ms: list[int]) -> list[str]:
    rows = []
    for m in ms:
        projections = [cells[(k, n, m)] for _, k, n in MODELS[model]]
        total = lambda field: sum(c[field] for c in projections)  # noqa: E731 - microseconds summed over projections
        full = total("full")
        ops = 2 * m * sum(k * n for _, k, n in MODELS[model])
        tdp_at_peak = total("tdp") * 2 * 16 * 16 * 64 / (peak * 1e9) * 1e6
        costs = {stage: full - total(f"-{stage}") for stage in STAGES}
        overlap = full - sum(costs.values()) - total("loops")
        decoded = sum(c["decoded_over_panel"] * k * n for c, (_, k, n) in zip(projections, MODELS[model])) / sum(
            k * n for _, k, n in MODELS[model])
        jobs = "/".join(str(int(c["jobs"])) for c in projections)
        pct = lambda us: f"{100 * us / full:.0f}"  # noqa: E731
        rows.append(f"| {model} | {m} | {full / 1e3:.3f} | {ops / full / 1e3:.0f} | {100 * ops / full / 1e3 / peak:.0f} | "
                    f"{pct(tdp_at_peak)} | " + " | ".join(pct(costs[s]) for s in STAGES) +
                    f" | {pct(total('loops'))} | {pct(overlap)} | {decoded:.2f} | {jobs} |")
    return rows


def main() -> int:
    parser = stage_profiles.arguments(__doc__)
    args = parser.parse_args()
    if platform.machine() not in ("x86_64", "AMD64"):
        sys.exit("amx_profile: x86-64 with AMX-INT8 only")
    exe = stage_profiles.build(args.build or stage_profiles.default_build_folder("amx_profile"), ["amx_profile"]) / "amx_profile"
    shapes = stage_profiles.shapes_of(args.models)
    peak, cells = run(exe, shapes, args.m, args.reps, args.min_seconds)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# amx kernel stages, 1 thread, CPU time | CPU: {cpu_name()} | {date} | tdpbssd peak {peak:.0f} GOP/s")
    print(f"# {args.reps} interleaved repetitions, median | command: python {' '.join(sys.argv)}")
    print("| model | M | ms | GOP/s | % peak | tdp@peak | quantize | decode | pack | tiles | epilogue | loops | overlap "
          "| decoded | jobs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        print("\n".join(table(model, peak, cells, args.m)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
