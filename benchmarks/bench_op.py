"""Benchmark: I2STernaryMatMul vs ONNX Runtime's own matmuls on the 7 projections of one
Qwen3-0.6B layer (q 1024->2048, k,v 1024->1024, o 2048->1024, gate,up 1024->3072, down 3072->1024).

Each variant is ONE ONNX graph holding the 7 projections (inputs X1 [M,1024], X2 [M,2048],
X3 [M,3072]; random ternary weights, the same for every variant):
  i2s-<isa>        our op, each x86 path this CPU has, forced with BITNET_ONNX_ISA per session
  i2s-<isa>+norm   the same with the fused RMSNorm input norm_weight
  fp32             ORT MatMul, float32 weights s_w * T
  dqmm             ORT com.microsoft DynamicQuantizeMatMul, int8 weights T, per-column scales
  nbits4           ORT com.microsoft MatMulNBits, 4 bits, block 128, accuracy_level 4

Method: inter_op 1, sequential execution, intra_op --threads, IOBinding into preallocated outputs.
A round runs every (variant, M) once: --warmup runs, then --runs timed runs, keeping the median;
rounds are interleaved so drifts hit every variant alike, and the figure is the median of the
round medians. Ratios come from the same run. Effective GOP/s counts 2*M*K*N. "peak" is a
register-only vpdpbusd zmm loop on this core, compiled and timed in a child process with the
system C++ compiler (falls back to --peak-gops when that is impossible, and says so).

    python benchmarks/bench_op.py                       # M = 1 32 512, 1 thread
    python benchmarks/bench_op.py --m 1 32 512 2048 --threads 1 --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from bitnet_onnx.commands.bench import cpu_name

PROJECTIONS = [  # (name, K, N) of one Qwen3-0.6B layer
    ("q", 1024, 2048),
    ("k", 1024, 1024),
    ("v", 1024, 1024),
    ("o", 2048, 1024),
    ("gate", 1024, 3072),
    ("up", 1024, 3072),
    ("down", 3072, 1024),
]
INPUT_WIDTHS = (1024, 2048, 3072)
OPS_PER_TOKEN = 2 * sum(k * n for _, k, n in PROJECTIONS)
X86_PATHS = ("amx", "avx512vnni", "avxvnni", "avx2")  # the x86 paths; ones the CPU lacks are skipped
S_W = 0.02  # weight scale of every projection


# ---------------------------------------------------------------------------------------------
# Graphs


def make_weights(seed: int = 0) -> list[np.ndarray]:
    """Ternary T [N, K] per projection, about a third zeros like trained BitNet weights."""
    rng = np.random.default_rng(seed)
    return [rng.choice(np.array([-1, 0, 1], np.int8), size=(n, k), p=[0.33, 0.34, 0.33]) for _, k, n in PROJECTIONS]


def make_norms(seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, size=k).astype(np.float32) for _, k, _ in PROJECTIONS]


def _nbits_b(t: np.ndarray, block: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """MatMulNBits 4-bit B [N, K/block, block/2] (low nibble first) and scales; zero point 8 is implied."""
    n, k = t.shape
    codes = (t.astype(np.int16) + 8).astype(np.uint8).reshape(n, k // block, block // 2, 2)
    packed = codes[..., 0] | (codes[..., 1] << 4)
    return packed, np.full(n * (k // block), S_W, np.float32)


def build_graph(kind: str, weights: list[np.ndarray], norms: list[np.ndarray] | None) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from bitnet_onnx.customops import DOMAIN as OP_DOMAIN
    from bitnet_onnx.customops import DOMAIN_VERSION as OP_DOMAIN_VERSION
    from bitnet_onnx.customops.i2s_matmul import NAME as OP_NAME
    from bitnet_onnx.ternary import pack_i2s

    nodes, inits, outputs = [], [], []
    inputs = [helper.make_tensor_value_info(f"X{k}", TensorProto.FLOAT, ["M", k]) for k in INPUT_WIDTHS]
    for i, ((name, k, n), t) in enumerate(zip(PROJECTIONS, weights)):
        x, y = f"X{k}", f"Y_{name}"
        if kind == "i2s":
            inits += [numpy_helper.from_array(pack_i2s(t), f"W{i}"), numpy_helper.from_array(np.array([S_W], np.float32), f"S{i}")]
            ins = [x, f"W{i}", f"S{i}"]
            if norms is not None:
                inits.append(numpy_helper.from_array(norms[i], f"N{i}"))
                ins.append(f"N{i}")
            nodes.append(helper.make_node(OP_NAME, ins, [y], domain=OP_DOMAIN, epsilon=1e-6))
        elif kind == "fp32":
            inits.append(numpy_helper.from_array((t.T.astype(np.float32) * np.float32(S_W)).copy(), f"W{i}"))
            nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [y]))
        elif kind == "dqmm":
            inits += [numpy_helper.from_array(t.T.copy(), f"W{i}"), numpy_helper.from_array(np.full(n, S_W, np.float32), f"S{i}")]
            nodes.append(helper.make_node("DynamicQuantizeMatMul", [x, f"W{i}", f"S{i}"], [y], domain="com.microsoft"))
        elif kind == "nbits4":
            b, scales = _nbits_b(t)
            inits += [numpy_helper.from_array(b, f"W{i}"), numpy_helper.from_array(scales, f"S{i}")]
            nodes.append(
                helper.make_node("MatMulNBits", [x, f"W{i}", f"S{i}"], [y], domain="com.microsoft",
                                 K=k, N=n, bits=4, block_size=128, accuracy_level=4)
            )
        else:
            raise ValueError(kind)
        outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, ["M", n]))
    graph = helper.make_graph(nodes, f"qwen3_layer_projections_{kind}", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    if kind == "i2s":
        opsets.append(helper.make_opsetid(OP_DOMAIN, OP_DOMAIN_VERSION))
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


# ---------------------------------------------------------------------------------------------
# Sessions and timing


class Variant:
    def __init__(self, label: str, kind: str, model: bytes, threads: int, isa: str | None = None):
        import onnxruntime as ort

        from bitnet_onnx import customops

        self.label, self.kind, self.isa = label, kind, isa
        so = customops.session_options(threads=threads) if kind == "i2s" else ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        old = os.environ.get("BITNET_ONNX_ISA")
        if isa:
            os.environ["BITNET_ONNX_ISA"] = isa  # read when the op's kernel is created
        try:
            self.session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        finally:
            if old is None:
                os.environ.pop("BITNET_ONNX_ISA", None)
            else:
                os.environ["BITNET_ONNX_ISA"] = old
        self.bindings: dict[int, object] = {}

    def bind(self, m: int, xs: dict[str, np.ndarray]):
        """IOBinding with the inputs and preallocated outputs for M tokens (kept alive here)."""
        import onnxruntime as ort

        if m not in self.bindings:
            io = self.session.io_binding()
            values = []
            for name, x in xs.items():
                v = ort.OrtValue.ortvalue_from_numpy(x)
                values.append(v)
                io.bind_ortvalue_input(name, v)
            widths = {f"Y_{name}": n for name, _, n in PROJECTIONS}
            for out in self.session.get_outputs():
                n = widths[out.name]
                v = ort.OrtValue.ortvalue_from_shape_and_type([m, n], np.float32)
                values.append(v)
                io.bind_ortvalue_output(out.name, v)
            self.bindings[m] = (io, values)
        return self.bindings[m]

    def run(self, m: int, xs) -> None:
        io, _ = self.bind(m, xs)
        self.session.run_with_iobinding(io)

    def outputs(self, m: int, xs) -> list[np.ndarray]:
        io, values = self.bind(m, xs)
        self.session.run_with_iobinding(io)
        return [v.numpy() for v in values[len(xs):]]


def time_runs(variant: Variant, m: int, xs, warmup: int, runs: int) -> float:
    """Median seconds of `runs` timed runs after `warmup` untimed ones."""
    for _ in range(warmup):
        variant.run(m, xs)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        variant.run(m, xs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ---------------------------------------------------------------------------------------------
# vpdpbusd peak (register-only loop in a child process)

PEAK_SOURCE = r"""
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
#define R(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
int main(void) {
  const long iters = 20000000; double best = 0;
  for (int r = 0; r < 5; ++r) {
    __m512i b = _mm512_set1_epi8(1), c = _mm512_set1_epi8(2);
#define D(i) __m512i a##i = _mm512_set1_epi32(i);
    R(D)
    double t0 = now();
    for (long it = 0; it < iters; ++it) {
#define U(i) a##i = _mm512_dpbusd_epi32(a##i, b, c);
      R(U)
      __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    double dt = now() - t0, gops = iters * 12.0 * 64 * 2 / dt / 1e9;
    __m512i s = _mm512_setzero_si512();
#define S(i) s = _mm512_add_epi32(s, a##i);
    R(S)
    if (_mm512_reduce_add_epi32(s) == 42) puts("");
    if (gops > best) best = gops;
  }
  printf("%.1f\n", best);
  return 0;
}
"""


def measure_peak() -> tuple[float | None, str]:
    """Best of 5 register-only vpdpbusd zmm loops (12 accumulators, thread CPU time), in GOP/s."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None, "no C compiler found"
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "peak.c"), os.path.join(tmp, "peak")
        with open(src, "w") as f:
            f.write(PEAK_SOURCE)
        build = subprocess.run([cc, "-O2", "-mavx512f", "-mavx512vnni", src, "-o", exe], capture_output=True, text=True)
        if build.returncode != 0:
            return None, "peak loop did not compile"
        run = subprocess.run([exe], capture_output=True, text=True)
        if run.returncode != 0:
            return None, "peak loop did not run (no AVX512-VNNI?)"
        return float(run.stdout.split()[-1]), "measured: register-only vpdpbusd zmm loop, 1 thread"


# ---------------------------------------------------------------------------------------------


def available_isas(requested: list[str], model: bytes, threads: int) -> list[str]:
    """The requested op paths this CPU runs (creating a session with a missing ISA fails cleanly)."""
    found = []
    for isa in requested:
        try:
            Variant(f"i2s-{isa}", "i2s", model, threads, isa)
            found.append(isa)
        except Exception as e:  # noqa: BLE001 - the library's message says why
            print(f"# skipping i2s-{isa}: {str(e).splitlines()[-1][:160]}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="example: python benchmarks/bench_op.py --m 1 32 512 2048 --threads 1")
    parser.add_argument("--m", type=int, nargs="+", default=[1, 32, 512], help="token counts M (default 1 32 512)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per round (default 3)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per round; fewer for runs over 50 ms (default 20)")
    parser.add_argument("--isa", nargs="+", default=list(X86_PATHS), help="op paths to force (default: the x86 SIMD paths)")
    parser.add_argument("--norm", choices=("both", "off", "on"), default="both", help="op variants with/without fused norm_weight")
    parser.add_argument("--baselines", nargs="*", default=["fp32", "dqmm", "nbits4"], help="ORT variants (default fp32 dqmm nbits4)")
    parser.add_argument("--peak-gops", type=float, default=1050.0,
                        help="vpdpbusd peak to use if it cannot be measured (default 1050, the Zen 5 figure of the research notes)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()

    import onnxruntime as ort

    weights, norms = make_weights(), make_norms()
    plain = build_graph("i2s", weights, None)
    isas = available_isas(args.isa, plain, args.threads)
    variants: list[Variant] = []
    for isa in isas:
        if args.norm in ("both", "off"):
            variants.append(Variant(f"i2s-{isa}", "i2s", plain, args.threads, isa))
        if args.norm in ("both", "on"):
            variants.append(Variant(f"i2s-{isa}+norm", "i2s", build_graph("i2s", weights, norms), args.threads, isa))
    for kind in args.baselines:
        variants.append(Variant(kind, kind, build_graph(kind, weights, None), args.threads))

    rng = np.random.default_rng(2)
    inputs = {m: {f"X{k}": rng.standard_normal((m, k)).astype(np.float32) for k in INPUT_WIDTHS} for m in args.m}
    errors = check_outputs(variants, inputs)

    peak, peak_note = measure_peak()
    if peak is None:
        peak, peak_note = args.peak_gops, f"constant --peak-gops ({peak_note})"

    # Fewer timed runs for slow cases so a round stays bounded; decided once from a probe run.
    runs = {}
    for v in variants:
        for m in args.m:
            t = time_runs(v, m, inputs[m], 1, 1)
            runs[(v.label, m)] = max(5, min(args.runs, int(1.0 / max(t, 1e-9)))) if t > 0.05 else args.runs
    rounds: dict[tuple[str, int], list[float]] = {key: [] for key in runs}
    for r in range(args.rounds):
        for m in args.m:
            for v in variants:
                rounds[(v.label, m)].append(time_runs(v, m, inputs[m], args.warmup, runs[(v.label, m)]))
        print(f"# round {r + 1}/{args.rounds} done", file=sys.stderr)

    results = []
    for m in args.m:
        med = {v.label: statistics.median(rounds[(v.label, m)]) for v in variants}
        for v in variants:
            s = med[v.label]
            gops = OPS_PER_TOKEN * m / s / 1e9
            results.append({
                "variant": v.label, "m": m, "ms": s * 1e3, "gops": gops,
                "x_dqmm": med["dqmm"] / s if "dqmm" in med else None,
                "x_fp32": med["fp32"] / s if "fp32" in med else None,
                "peak_fraction": gops / peak, "rel_err_vs_fp64": errors.get((v.label, m)),
                "round_ms": [t * 1e3 for t in rounds[(v.label, m)]],
            })

    header = {
        "cpu": cpu_name(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "onnxruntime": ort.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "threads": args.threads, "rounds": args.rounds, "warmup": args.warmup, "runs": args.runs,
        "peak_gops": peak, "peak_note": peak_note, "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    print_table(header, results, args.m)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "results": results}, f, indent=1)
    return 0


def check_outputs(variants: list[Variant], inputs) -> dict:
    """Max relative error of every variant vs a float64 ternary matmul (the plain, un-normed input
    for all but +norm variants, which are compared with their own float64 RMSNorm)."""
    weights, norms = make_weights(), make_norms()
    errs = {}
    for m, xs in inputs.items():
        for v in variants:
            outs = v.outputs(m, xs)
            worst = 0.0
            for (name, k, n), t, nw, y in zip(PROJECTIONS, weights, norms, outs):
                x = xs[f"X{k}"].astype(np.float64)
                if v.label.endswith("+norm"):
                    x = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * nw
                ref = x @ (t.T.astype(np.float64) * S_W)
                worst = max(worst, float(np.max(np.abs(y - ref)) / max(np.max(np.abs(ref)), 1e-30)))
            errs[(v.label, m)] = worst
    return errs


def print_table(header: dict, results: list[dict], ms: list[int]) -> None:
    print(f"# I2STernaryMatMul vs ORT, 7 projections of one Qwen3-0.6B layer ({OPS_PER_TOKEN / 1e6:.1f} MOP per token)")
    print(f"# CPU: {header['cpu']} | {header['date']} | onnxruntime {header['onnxruntime']} | threads {header['threads']}")
    print(f"# {header['rounds']} interleaved rounds x ({header['warmup']} warm-up + up to {header['runs']} timed runs); "
          "median of round medians")
    print(f"# peak: {header['peak_gops']:.0f} GOP/s ({header['peak_note']})")
    print(f"# command: {header['command']}")
    print()
    print(f"| variant | M | ms | GOP/s | x DQMM | x fp32 | % peak | rel. err |")
    print(f"|---|---|---|---|---|---|---|---|")
    for r in results:
        fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        print(f"| {r['variant']} | {r['m']} | {r['ms']:.3f} | {r['gops']:.0f} | {fmt(r['x_dqmm'], '.2f')} | "
              f"{fmt(r['x_fp32'], '.2f')} | {100 * r['peak_fraction']:.0f} | {fmt(r['rel_err_vs_fp64'], '.1e')} |")


if __name__ == "__main__":
    sys.exit(main())
