"""Where the multiply SIMD kernels' time goes (issue 40): avx512vnni, avxvnni, avx2, stage by stage, on one thread.

Builds customops/tests/panel_profile.cc, one program per ISA whose multiply kernel is the panel's (CMake target
panel_profiles: panel_profile_<isa>, the ISA's kernel file, i2s/mul/<isa>.cc, compiled with its own flags and
the panel's stage switches) and runs each on
the 7 projections of one layer of each model of bench_op.py (MODELS), then sums the projections per (ISA,
model, M), as bench_op.py's rows do. A stage's cost is what it adds to the call: the whole call's time minus
the call's time with that stage left out (CPU time of the thread, median of interleaved repetitions), so the
stages' costs need not add up to the whole when they overlap ("overlap": the whole minus their sum and
"loops"). The buffered path only (M from 16 on; fewer tokens unpack in registers, inseparable from the steps).
Columns, in % of the whole call unless named:
  % peak     GOP/s (2*M*K*N) over the ISA's register peak (benchmarks/register_peaks.c, as bench_op.py's)
  quantize   the activations' absmax int8 quantization (the fused norm is off, as in bench_op.py)
  unpack     2-bit codes of a panel and K block to the L1 buffer of code bytes
  steps      the microkernel's loads, broadcasts and step instructions ("steps' own": the time its
             multiply-adds, padding rows included, take at the peak over the stage's cost: how close the loop
             itself runs to the register loop)
  widen      int16 chunk sums to int32 (avx2; vpdpbusd sums in int32: nothing)
  emit       the sums to (float(sum - qsum) / a) * s_w into Y (or int32 partial sums between K blocks)
  loops      the call with every stage above left out (loop, tile and job overhead)
  unpacked   bytes unpacked per call over the panel's codes (> 1 where M spans several job rows)

    python benchmarks/panel_profile.py                          # every ISA this CPU runs, both models
    python benchmarks/panel_profile.py --isa avx2 --models qwen3 --m 512 --reps 5
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

STAGES = ["quantize", "unpack", "steps", "widen", "emit"]
NOT_RUN_HERE = 3  # panel_profile's exit code where this CPU does not run the ISA


def table(isa: str, model: str, peak: float, cells: dict, ms: list[int]) -> list[str]:
    """The rows of one ISA and model, one per M, over the sum of its 7 projections."""
    rows = []
    for m in ms:
        projections = [cells[(k, n, m)] for _, k, n in MODELS[model]]
        if any(c.get("direct") for c in projections):
            rows.append(f"| {isa} | {model} | {m} | few tokens: the direct path, no separate stages |")
            continue
        total = lambda field: sum(c[field] for c in projections)  # noqa: E731 - summed over projections
        full = total("full")
        gops = 2 * m * sum(k * n for _, k, n in MODELS[model]) / full / 1e3
        at_peak = 2 * total("macs") / (peak * 1e3)  # microseconds
        costs = {stage: full - total(f"-{stage}") for stage in STAGES}
        overlap = full - sum(costs.values()) - total("loops")
        unpacked = sum(c["unpacked_over_codes"] * k * n for c, (_, k, n) in zip(projections, MODELS[model])) / sum(
            k * n for _, k, n in MODELS[model])
        pct = lambda us: f"{100 * us / full:.0f}"  # noqa: E731
        rows.append(f"| {isa} | {model} | {m} | {full / 1e3:.3f} | {gops:.0f} | {100 * gops / peak:.0f} | "
                    + " | ".join(pct(costs[s]) for s in STAGES)
                    + f" | {100 * at_peak / costs['steps']:.0f} | {pct(total('loops'))} | {pct(overlap)} | {unpacked:.2f} |")
    return rows


def main() -> int:
    parser = stage_profiles.arguments(__doc__)
    parser.add_argument("--isa", nargs="+", help="of the panel kernels' ISAs (avx512vnni, avxvnni, avx2; default: every "
                        "one this CPU runs)")
    args = parser.parse_args()
    if platform.machine() not in ("x86_64", "AMD64"):
        sys.exit("panel_profile: x86-64 only (the panel kernels are the x86 multiply kernels)")
    folder = stage_profiles.build(args.build or stage_profiles.default_build_folder("panel_profile"), ["panel_profiles"])
    isas = stage_profiles.panel_isas(folder)
    if unknown := set(args.isa or []) - set(isas):
        sys.exit(f"panel_profile: --isa {' '.join(sorted(unknown))}: not a panel kernel's ISA (those: {', '.join(isas)})")
    shapes = stage_profiles.shapes_of(args.models)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# multiply kernels' stages, 1 thread, CPU time | CPU: {cpu_name()} | {date}")
    print(f"# {args.reps} interleaved repetitions, median | command: python {' '.join(sys.argv)}")
    rows, notes = [], []
    for isa in args.isa or isas:
        _, cells, res = stage_profiles.run(folder / f"panel_profile_{isa}", shapes, args.m, args.reps, args.min_seconds,
                                           check=False)
        if res.returncode == NOT_RUN_HERE:
            notes.append(f"# {isa}: not run here ({res.stderr.strip()})")
            continue
        if res.returncode != 0:
            sys.exit(f"panel_profile_{isa} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
        peak, what = run_peak_loop(OP_NAME, isa)  # only for a path this CPU runs
        if peak is None:
            sys.exit(f"panel_profile: no register peak for {isa}: {what}")
        notes.append(f"# peak {isa}: {peak:.0f} GOP/s ({what})")
        rows += [row for model in args.models for row in table(isa, model, peak, cells, args.m)]
    print("\n".join(notes))
    print("| ISA | model | M | ms | GOP/s | % peak | quantize | unpack | steps | widen | emit | steps' own | loops "
          "| overlap | unpacked |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
