"""Benchmark: I2STernaryMatMul, each kernel path against its own register peak and against ORT's
own matmuls, on the 7 projections of one layer of Qwen3-0.6B and of Gemma3-270M.

Models (one ONNX graph per model and variant holding the layer's 7 projections; random ternary
weights, the same for every variant; one input per distinct K):
  qwen3   q 1024->2048, k,v 1024->1024, o 2048->1024, gate,up 1024->3072, down 3072->1024
  gemma3  q 640->1024, k,v 640->256, o 1024->640, gate,up 640->2048, down 2048->640
Variants:
  i2s-<isa>        our op, every SIMD path this CPU runs (x86-64: amx .. avx2; aarch64: i8mm, dotprod,
                   neon), forced with BITNET_ONNX_ISA per session
  i2s-<isa>+norm   the same with the fused RMSNorm input norm_weight (--norm on|both)
  i2s-<isa>-lut    the lookup kernel family forced (BITNET_ONNX_KERNEL=lut; --family), -mul the
                   multiply one, -mul_direct the multiply kernels' direct path at every M, -rules
                   the compiled rules' choice; plain i2s-<isa> is the op's own
                   choice, measured on this host per shape (docs/op.md, "Kernel families")
  fp32             ORT MatMul, float32 weights s_w * T
  dqmm             ORT com.microsoft DynamicQuantizeMatMul, int8 weights T, per-column scales
  nbits4           ORT com.microsoft MatMulNBits, 4 bits, block 128, accuracy_level 4 (opt-in)

Peaks: each path's inner instruction in a register-only loop (12 independent accumulators) of
benchmarks/register_peaks.c, whose LOOPS table names the path each loop bounds, compiled with the system C
compiler and timed in a child process on this core:
  avx2        vpmaddubsw + vpaddw, ymm          avx512vnni  vpdpbusd, zmm
  avxvnni     vpdpbusd, ymm (VEX; where that does not run but AVX512-VNNI does, the EVEX ymm form
              stands in and the header says so: same instruction, same ports)
  amx         tdpbusd, 4 tiles of 16x16 int32 (only where the CPU and OS allow AMX)
  lut-avx2    the lookup kernels' inner step: load a pattern byte, vpaddw ymm of the table entry
  lut-avx512  it indexes (16 tokens x 4 weights per ymm, 32 per zmm) from 41 KB of L1-resident tables
  aarch64: neon smlal int8 -> int16, dotprod sdot, i8mm smmla (2x8 by 8x2), lut-neon the
              lookup step (index byte, add .8h of a 16-token entry from 31 KB of L1 tables)
"% peak" = a path's GOP/s over its own peak (-lut rows: their lookup kernel's, -mul rows the
multiply path's, plain i2s-<isa> rows too where the ISA has no other family; "-" for plain rows of an
ISA with two families, which may run either, and for -rules rows whose rules pick either, avx2);
baselines are shown against the peak of the op's default path here (its multiply kernel: amx, avx512vnni,
... by the library's dispatch), the int8 unit MLAS picks too. GOP/s counts 2*M*K*N.
"x mul" = over the -mul variant of the same ISA (run with --family ... mul); "x best" (plain i2s-<isa> rows,
with every family forced too) = the fastest forced family's time over the op's own choice's: 1.00 when the
measured choice is the fastest, 0.97 when it is 3% slower. "x pick" (--projections: one shape per row) = the
same for the family the op picked, timed forced in the same rounds: the pick's quality without the noise of the
op's own row (which runs that family's kernel too, after a table lookup per call).

Method: inter_op 1, sequential execution, intra_op = each of --threads, IOBinding into preallocated
outputs. A round runs every (model, M, variant) once: warm-up runs, then timed runs, keeping the
median; rounds are interleaved so drifts hit every variant alike, and the figure is the median of
the round medians. Ratios come from the same run. --clock cpu times the calling thread's CPU time
instead of wall time (1 thread only: ORT runs a 1-thread session in the caller), which keeps
other processes' load on a shared machine out of the numbers.

    python benchmarks/bench_op.py --quick                            # a few minutes: iterate
    python benchmarks/bench_op.py                                    # the BENCHMARKS.md table
    python benchmarks/bench_op.py --threads 1 2 --m 32 128 512 --isa avx512vnni avx2
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from bitnet_onnx import arch
from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.customops.i2s_matmul import NAME as OP_NAME

def _layer_projections(name: str) -> list[tuple[str, int, int]]:
    """The 7 projections (name, K, N) of one layer of architecture ``name``'s released model (arch.REAL_SHAPES)."""
    cfg = arch.ModelConfig.from_dict(arch.REAL_SHAPES[name].config, arch.ARCHITECTURES[name])
    return [(p.name, cfg.dims[p.in_dim], cfg.dims[p.out_dim]) for p in arch.PROJECTIONS]


MODELS = {name: _layer_projections(name) for name in arch.REAL_SHAPES}  # model -> the 7 projections (name, K, N)
# --projections: each projection a graph of its own, "<model>.<projection>" (the op's choice is per shape)
PROJECTIONS = {f"{model}.{name}": [(name, k, n)] for model, layer in MODELS.items() for name, k, n in layer}
S_W = 0.02  # weight scale of every projection
DEFAULT_M = [1, 16, 32, 128, 512, 2048]
QUICK = dict(m=[1, 16, 512], rounds=2, runs=5, warmup=2)


@functools.cache
def dispatch():
    """The library's own dispatch (customops.dispatch: its ISA table, each family's kernel per ISA and the
    families' rules), from which every ISA- or family-keyed fact of this benchmark follows."""
    from bitnet_onnx import customops

    return customops.dispatch({})


def simd_paths() -> list[str]:
    """The SIMD kernel names this build of the library has, best first, as the library lists them
    (its ISA table: the x86 paths on x86-64, i8mm / dotprod / neon on aarch64)."""
    return [isa.name for isa in dispatch().isas if isa.built and isa.name != "scalar"]


CHOSEN = ("auto", "rules")  # --family values where the op chooses: measured on this host (unset), the compiled rules


def family_kernel(isa: str, family: str) -> str | None:
    """The kernel a variant of `family` (CHOSEN: the op's per-call choice, named by its base kernel, the
    ISA's) runs on `isa`, None where the family has none there; an unknown ISA or family fails by name."""
    if family in CHOSEN:
        family = dispatch().base_family().name
    return dispatch().kernel(isa, family)


def forced_families(isa: str) -> list[str]:
    """The families with a kernel on `isa`: the candidates of the op's own choice there."""
    return [family.name for family in dispatch().families if dispatch().kernel(isa, family.name) is not None]


def chosen_may_run_another_family(isa: str, family: str) -> bool:
    """Whether the op's own choice (plain i2s-<isa> and -rules rows) may run a family other than the base one on
    `isa`: measured, any family with a kernel there; by the rules, a family with a rule for it (FamilyRule,
    customops/kernels/i2s/family.h)."""
    if family == "auto":
        return len(forced_families(isa)) > 1
    return any(rule.isa == isa for other in dispatch().other_families() for rule in other.rules)


def ops_per_token(model: str) -> int:
    return 2 * sum(k * n for _, k, n in MODELS[model])


def input_widths(model: str) -> list[int]:
    return sorted({k for _, k, _ in MODELS[model]})


# ---------------------------------------------------------------------------------------------
# Graphs


def make_weights(model: str, seed: int = 0) -> list[np.ndarray]:
    """Ternary T [N, K] per projection, about a third zeros like trained BitNet weights."""
    rng = np.random.default_rng(seed)
    return [rng.choice(np.array([-1, 0, 1], np.int8), size=(n, k), p=[0.33, 0.34, 0.33]) for _, k, n in MODELS[model]]


def make_norms(model: str, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, size=k).astype(np.float32) for _, k, _ in MODELS[model]]


def _nbits_b(t: np.ndarray, block: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """MatMulNBits 4-bit B [N, K/block, block/2] (low nibble first) and scales; zero point 8 is implied."""
    n, k = t.shape
    codes = (t.astype(np.int16) + 8).astype(np.uint8).reshape(n, k // block, block // 2, 2)
    packed = codes[..., 0] | (codes[..., 1] << 4)
    return packed, np.full(n * (k // block), S_W, np.float32)


def build_graph(model: str, kind: str, weights: list[np.ndarray], norms: list[np.ndarray] | None) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    from bitnet_onnx.customops import DOMAIN as OP_DOMAIN
    from bitnet_onnx.customops import DOMAIN_VERSION as OP_DOMAIN_VERSION
    from bitnet_onnx.ternary import pack_i2s

    nodes, inits, outputs = [], [], []
    inputs = [helper.make_tensor_value_info(f"X{k}", TensorProto.FLOAT, ["M", k]) for k in input_widths(model)]
    for i, ((name, k, n), t) in enumerate(zip(MODELS[model], weights)):
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
    graph = helper.make_graph(nodes, f"{model}_layer_projections_{kind}", inputs, outputs, inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    if kind == "i2s":
        opsets.append(helper.make_opsetid(OP_DOMAIN, OP_DOMAIN_VERSION))
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


# ---------------------------------------------------------------------------------------------
# Sessions and timing


class Variant:
    def __init__(self, model: str, label: str, kind: str, graph: bytes, threads: int, isa: str | None = None,
                 family: str = "auto"):
        import onnxruntime as ort

        from bitnet_onnx import customops

        self.model, self.label, self.kind, self.isa, self.threads = model, label, kind, isa, threads
        self.family = family
        so = customops.session_options(threads=threads) if kind == "i2s" else ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        forced = {"BITNET_ONNX_ISA": isa, "BITNET_ONNX_KERNEL": None if family == "auto" else family}  # unset: measured
        old = {name: os.environ.get(name) for name in forced}
        for name, value in forced.items():  # read when the op's kernel is created
            if value:
                os.environ[name] = value
            else:
                os.environ.pop(name, None)
        try:
            self.session = ort.InferenceSession(graph, so, providers=["CPUExecutionProvider"])
        finally:
            for name, value in old.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
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
            widths = {f"Y_{name}": n for name, _, n in MODELS[self.model]}
            for out in self.session.get_outputs():
                v = ort.OrtValue.ortvalue_from_shape_and_type([m, widths[out.name]], np.float32)
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


def time_runs(variant: Variant, m: int, xs, warmup: int, runs: int, clock) -> float:
    """Median seconds of `runs` timed runs after `warmup` untimed ones."""
    for _ in range(warmup):
        variant.run(m, xs)
    times = []
    for _ in range(runs):
        t0 = clock()
        variant.run(m, xs)
        times.append(clock() - t0)
    return statistics.median(times)


# ---------------------------------------------------------------------------------------------
# Register peaks (a register-only loop per path, compiled and run in a child process)

PEAK_SOURCE = Path(__file__).with_name("register_peaks.c")  # the loops and their one list (LOOPS)


class PeakLoop(NamedTuple):
    """A row of register_peaks.c's LOOPS: one build of the loop that bounds a path."""

    op: str  # the op whose path it bounds (I2STernaryMatMul, EncoderAttention)
    name: str  # the path's name in the library's dispatch (a kernel, an attention tile path), or "stream"
    path: int  # the PATH macro that selects its code
    flags: list[str]  # compiler flags
    what: str  # what it runs


def _compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@functools.cache
def peak_loops(op: str) -> dict[str, list[PeakLoop]]:
    """name -> the builds of its loop, in the order to try them, as register_peaks.c lists them (built without
    PATH, it prints its LOOPS table: this machine's rows); {} without a C compiler."""
    cc = _compiler()
    if cc is None:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "loops")
        subprocess.run([cc, "-O2", str(PEAK_SOURCE), "-o", exe], check=True, capture_output=True)
        table = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    loops: dict[str, list[PeakLoop]] = {}
    for line in table.splitlines():
        row_op, name, path, flags, what = line.split("\t")
        if row_op == op:
            loops.setdefault(name, []).append(PeakLoop(row_op, name, int(path), flags.split(), what))
    return loops


def run_peak_loop(op: str, name: str, extra_flags: tuple[str, ...] = ()) -> tuple[float | None, str]:
    """(the number register_peaks.c's loop for `name` of `op` prints: GOP/s, GFLOP/s or GB/s for the stream; what
    it ran) from the first of its builds that compiles and runs on this CPU; (None, why) where none does."""
    cc = _compiler()
    if cc is None:
        return None, "no C compiler"
    builds = peak_loops(op).get(name)
    if not builds:
        return None, f"no register peak loop for {name} in register_peaks.c"
    with tempfile.TemporaryDirectory() as tmp:
        for build in builds:
            exe = os.path.join(tmp, f"peak{build.path}")
            cmd = [cc, "-O2", f"-DPATH={build.path}", *build.flags, *extra_flags, str(PEAK_SOURCE), "-o", exe]
            if subprocess.run(cmd, capture_output=True).returncode != 0:
                continue
            run = subprocess.run([exe], capture_output=True, text=True)
            if run.returncode == 0:
                return float(run.stdout.split()[0]), build.what
    return None, f"{builds[0].what}: not measurable on this CPU/compiler"


def packed_weight_bytes(model: str) -> int:
    """Bytes of one layer's 2-bit weights (what M=1 streams)."""
    return sum(k * n // 4 for _, k, n in MODELS[model])


def measure_stream(models: list[str]) -> dict[str, float | None]:
    """model -> GB/s of one core reading the layer's packed-weight bytes over and over (from L3
    when they exceed L2, as at M=1 where every token reads every weight once)."""
    return {model: run_peak_loop(OP_NAME, "stream", (f"-DBYTES={packed_weight_bytes(model) // 128 * 128}L",))[0]
            for model in models}


def measure_peaks(paths: list[str]) -> dict[str, tuple[float | None, str]]:
    """path -> (GOP/s or None, what was measured or why not)."""
    return {path: run_peak_loop(OP_NAME, path) for path in paths}


# ---------------------------------------------------------------------------------------------


def available_isas(requested: list[str], model: str, graph: bytes, threads: int) -> list[str]:
    """The requested op paths this CPU runs (creating a session with a missing ISA fails cleanly)."""
    found = []
    for isa in requested:
        try:
            Variant(model, f"i2s-{isa}", "i2s", graph, threads, isa)
            found.append(isa)
        except Exception as e:  # noqa: BLE001 - the library's message says why
            print(f"# skipping i2s-{isa}: {str(e).splitlines()[-1][:160]}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="example: python benchmarks/bench_op.py --quick")
    parser.add_argument("--quick", action="store_true",
                        help=f"iterate fast: M {QUICK['m']}, {QUICK['rounds']} rounds of {QUICK['runs']} runs (explicit flags win)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS), help="layer shapes (default both)")
    parser.add_argument("--projections", action="store_true",
                        help="each projection of the models a graph of its own (rows <model>.<projection>): "
                             "the op's measured choice against every family per shape")
    parser.add_argument("--m", type=int, nargs="+", help=f"token counts M (default {' '.join(map(str, DEFAULT_M))})")
    parser.add_argument("--threads", type=int, nargs="+", default=[1], help="intra-op thread counts (default 1)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3)")
    parser.add_argument("--warmup", type=int, help="untimed runs per round (default 3)")
    parser.add_argument("--runs", type=int, help="timed runs per round; fewer for runs over 50 ms (default 20)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time, or the calling thread's CPU time (1 thread only; default wall)")
    parser.add_argument("--isa", nargs="+", default=simd_paths(), help="op paths to force (default: the SIMD paths of this build)")
    families = [family.name for family in dispatch().families]  # the library's family table, base first
    parser.add_argument("--family", nargs="+", choices=[*CHOSEN, *families], default=["auto", *families[1:]],
                        help=f"kernel families per ISA: auto (the op's choice measured on this host, label i2s-<isa>), "
                             "rules (the compiled rules' choice, BITNET_ONNX_KERNEL=rules), "
                             f"{' / '.join(families)} (forced with BITNET_ONNX_KERNEL, labels i2s-<isa>-<family>); "
                             f"default auto and every family but the base one ({families[0]})")
    parser.add_argument("--norm", choices=("both", "off", "on"), default="off", help="op variants with/without fused norm_weight")
    parser.add_argument("--baselines", nargs="*", default=["fp32", "dqmm"], help="ORT variants (default fp32 dqmm; also nbits4)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    defaults = QUICK if args.quick else dict(m=DEFAULT_M, rounds=3, runs=20, warmup=3)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.projections:
        MODELS.update(PROJECTIONS)
        args.models = [p for p in PROJECTIONS if p.split(".")[0] in args.models]
    if args.clock == "cpu" and args.threads != [1]:
        parser.error("--clock cpu times the calling thread: use it with --threads 1 only")
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter

    import onnxruntime as ort

    variants: list[Variant] = []
    inputs: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    rng = np.random.default_rng(2)
    isas: list[str] = []
    for model in args.models:
        weights, norms = make_weights(model), make_norms(model)
        plain = build_graph(model, "i2s", weights, None)
        normed = build_graph(model, "i2s", weights, norms) if args.norm != "off" else None
        isas = isas or available_isas(args.isa, model, plain, args.threads[0])
        baselines = {kind: build_graph(model, kind, weights, None) for kind in args.baselines}
        for threads in args.threads:
            for isa in isas:
                for family in args.family:
                    if family_kernel(isa, family) is None:
                        print(f"# skipping i2s-{isa}-{family}: the {family} family has no kernel on {isa}",
                              file=sys.stderr)
                        continue
                    tag = "" if family == "auto" else f"-{family}"
                    if args.norm in ("both", "off"):
                        variants.append(Variant(model, f"i2s-{isa}{tag}", "i2s", plain, threads, isa, family))
                    if normed is not None:
                        variants.append(Variant(model, f"i2s-{isa}{tag}+norm", "i2s", normed, threads, isa, family))
            for kind, graph in baselines.items():
                variants.append(Variant(model, kind, kind, graph, threads))
        for m in args.m:
            inputs[(model, m)] = {f"X{k}": rng.standard_normal((m, k)).astype(np.float32) for k in input_widths(model)}
    errors = check_outputs(variants, inputs, args.models)
    # ORT's baselines are measured against the int8 unit of this CPU's best path: the op's default ISA's
    # multiply kernel (MLAS picks the same unit: AMX tiles, VNNI or AVX2 multiplies)
    reference_path = family_kernel(dispatch().default_isa, "auto")
    peaks = measure_peaks(list(dict.fromkeys([*(kernel for isa in isas for family in ["auto", *args.family]
                                                if (kernel := family_kernel(isa, family)) is not None),
                                              *([reference_path] if args.baselines else [])])))
    stream = measure_stream(args.models)

    # Fewer timed runs for slow cases so a round stays bounded; decided once from a probe run.
    cells = [(v, m) for v in variants for m in args.m]
    runs, warmup = {}, {}
    for v, m in cells:
        t = time_runs(v, m, inputs[(v.model, m)], 1, 1, time.perf_counter)
        slow = t > 0.05
        runs[(id(v), m)] = max(3, min(args.runs, int(1.0 / t))) if slow else args.runs
        warmup[(id(v), m)] = 1 if slow else args.warmup
    rounds: dict[tuple[int, int], list[float]] = {key: [] for key in runs}
    for r in range(args.rounds):
        for m in args.m:
            for v in variants:
                key = (id(v), m)
                rounds[key].append(time_runs(v, m, inputs[(v.model, m)], warmup[key], runs[key], clock))
        print(f"# round {r + 1}/{args.rounds} done", file=sys.stderr)

    ref_peak = peaks[reference_path][0] if reference_path in peaks else None
    results = []
    for model in args.models:
        for threads in args.threads:
            for m in args.m:
                group = [v for v in variants if v.model == model and v.threads == threads]
                med = {v.label: statistics.median(rounds[(id(v), m)]) for v in group}
                one_thread = {v.label: statistics.median(rounds[(id(v), m)]) for v in variants
                              if v.model == model and v.threads == args.threads[0]}
                for v in group:
                    s = med[v.label]
                    gops = ops_per_token(model) * m / s / 1e9
                    # auto rows run whichever family the op picks per call: no single peak where both exist
                    path = family_kernel(v.isa, v.family) if v.isa else None
                    ambiguous = v.family in CHOSEN and v.isa is not None and chosen_may_run_another_family(v.isa, v.family)
                    norm = "+norm" if v.label.endswith("+norm") else ""
                    forced = [f"i2s-{v.isa}-{f}{norm}" for f in forced_families(v.isa)] if v.isa else []
                    peak = None if ambiguous else peaks.get(path, (None, ""))[0] if v.isa else ref_peak
                    mul_label = f"i2s-{v.isa}-mul{norm}"
                    results.append({
                        "model": model, "variant": v.label, "threads": threads, "m": m, "ms": s * 1e3, "gops": gops,
                        "peak_fraction": gops / peak if peak else None,
                        "x_dqmm": med["dqmm"] / s if "dqmm" in med else None,
                        "x_fp32": med["fp32"] / s if "fp32" in med else None,
                        # over our multiply path on the same ISA (the -mul variant: --family ... mul)
                        "x_mul": med[mul_label] / s if v.isa and mul_label in med else None,
                        # the op's own choice against the fastest family forced (every one of the ISA's was run)
                        "x_best": (min(med[f] for f in forced) / s
                                   if v.family in CHOSEN and forced and all(f in med for f in forced) else None),
                        # the same for the family the op picked, timed forced beside it: the pick's quality
                        # without the op row's own noise (filled in below, once the picks are known)
                        "x_pick": None,
                        "x_first_threads": one_thread[v.label] / s,
                        # M=1 reads every packed weight once: time over streaming them at L3 bandwidth
                        "x_l3_floor": (s / (packed_weight_bytes(model) / (stream[model] * 1e9))
                                       if m == 1 and v.kind == "i2s" and stream.get(model) else None),
                        "rel_err_vs_fp64": errors.get((v.model, v.label, m)),
                        "round_ms": [t * 1e3 for t in rounds[(id(v), m)]],
                    })

    header = {
        "cpu": cpu_name(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "onnxruntime": ort.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "threads": args.threads, "rounds": args.rounds, "warmup": args.warmup, "runs": args.runs, "clock": args.clock,
        "peaks": {p: {"gops": g, "what": w} for p, (g, w) in peaks.items()},
        "stream_gbs": stream,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    # what the plain i2s-<isa> rows ran: the families the op measured in this process, per shape and M range
    from bitnet_onnx import customops

    measured = customops.dispatch().measured
    header["measured_families"] = [shape.describe() for shape in measured]
    fill_picks(results, measured)
    print_table(header, results, args.threads)
    print("\n# the op's measured family choices (plain i2s-<isa> rows; docs/op.md, \"Kernel families\"):")
    for line in header["measured_families"]:
        print(f"#   {line}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "results": results}, f, indent=1)
    return 0


def picked_family(measured, isa: str, model: str, m: int) -> str | None:
    """The family the op's measured choice runs for M tokens of a --projections row (one shape), None when it
    measured none for it (or the row holds several shapes)."""
    if len(MODELS[model]) != 1:
        return None
    _, k, n = MODELS[model][0]
    return next((shape.runs for shape in measured if shape.isa == isa and shape.n == n and shape.k == k
                 and shape.m_first <= m and (shape.m_last is None or m <= shape.m_last)), None)


def fill_picks(results: list[dict], measured) -> None:
    """x_pick of the op's own rows (plain i2s-<isa>, --projections): the fastest forced family's time over the
    forced row of the family the op picked, both from the same interleaved rounds: 1.00 when it picked the fastest.
    x_best times the op's own row instead, which adds that row's noise to the pick's quality."""
    by_cell = {(r["model"], r["variant"], r["threads"], r["m"]): r["ms"] for r in results}
    for r in results:
        if r["x_best"] is None:
            continue
        norm = "+norm" if r["variant"].endswith("+norm") else ""
        isa = r["variant"].removeprefix("i2s-").removesuffix(norm)
        family = picked_family(measured, isa, r["model"], r["m"])
        picked = by_cell.get((r["model"], f"i2s-{isa}-{family}{norm}", r["threads"], r["m"])) if family else None
        if picked:
            fastest = r["x_best"] * r["ms"]  # the fastest forced family's ms (x_best = fastest / this row's ms)
            r["x_pick"] = fastest / picked


def check_outputs(variants: list[Variant], inputs, models: list[str]) -> dict:
    """Max relative error of every variant vs a float64 ternary matmul (the plain, un-normed input
    for all but +norm variants, which are compared with their own float64 RMSNorm)."""
    errs = {}
    for model in models:
        weights, norms = make_weights(model), make_norms(model)
        for (mod, m), xs in inputs.items():
            if mod != model:
                continue
            for v in variants:
                if v.model != model or (model, v.label, m) in errs:
                    continue
                worst = 0.0
                for (_, k, _), t, nw, y in zip(MODELS[model], weights, norms, v.outputs(m, xs)):
                    x = xs[f"X{k}"].astype(np.float64)
                    if v.label.endswith("+norm"):
                        x = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * nw
                    ref = x @ (t.T.astype(np.float64) * S_W)
                    worst = max(worst, float(np.max(np.abs(y - ref)) / max(np.max(np.abs(ref)), 1e-30)))
                errs[(model, v.label, m)] = worst
    return errs


def print_table(header: dict, results: list[dict], threads: list[int]) -> None:
    models = dict.fromkeys(r["model"] for r in results)
    print("# I2STernaryMatMul vs ORT, the projections of one layer (each alone with --projections): "
          + ", ".join(f"{m} {ops_per_token(m) / 1e6:.1f} MOP/token" for m in models))
    print(f"# CPU: {header['cpu']} | {header['date']} | onnxruntime {header['onnxruntime']} | threads {threads} "
          f"| clock {header['clock']}")
    print(f"# {header['rounds']} interleaved rounds x ({header['warmup']} warm-up + up to {header['runs']} timed runs); "
          "median of round medians")
    for path, p in header["peaks"].items():
        print(f"# peak {path}: " + (f"{p['gops']:.0f} GOP/s" if p["gops"] else "-") + f" ({p['what']})")
    for model, gbs in header["stream_gbs"].items():
        if gbs:
            print(f"# {model}: one layer's packed weights {packed_weight_bytes(model) / 1e6:.2f} MB, read at {gbs:.0f} GB/s "
                  f"by one core = {packed_weight_bytes(model) / gbs / 1e3:.1f} us (the M=1 floor; 'x floor' column)")
    print(f"# command: {header['command']}")
    print()
    multi = len(threads) > 1
    extra = f" x {threads[0]} thr |" if multi else ""
    print(f"| model | variant | thr | M | ms | GOP/s | % its peak | x DQMM | x fp32 | x mul | x best | x pick |{extra} "
          "x floor | rel. err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if multi else "") + "---|---|")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for r in results:
        pct = None if r["peak_fraction"] is None else 100 * r["peak_fraction"]
        cols = [r["model"], r["variant"], str(r["threads"]), str(r["m"]), f"{r['ms']:.3f}", f"{r['gops']:.0f}",
                fmt(pct, ".0f"), fmt(r["x_dqmm"], ".2f"), fmt(r["x_fp32"], ".2f"), fmt(r.get("x_mul"), ".2f"),
                fmt(r.get("x_best"), ".2f"), fmt(r.get("x_pick"), ".2f")]
        if multi:
            cols.append(f"{r['x_first_threads']:.2f}")
        cols.append(fmt(r["x_l3_floor"], ".2f"))
        cols.append(fmt(r["rel_err_vs_fp64"], ".1e"))
        print("| " + " | ".join(cols) + " |")


if __name__ == "__main__":
    sys.exit(main())
