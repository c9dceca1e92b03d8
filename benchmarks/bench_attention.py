"""Benchmark: one layer's attention core on ORT's CPU EP, the fused EncoderAttention op against the
decomposed graph the exporter emits today and ORT's own fused ops, at Qwen3-0.6B and Gemma3-270M shapes.

    .venv/bin/python benchmarks/bench_attention.py [--reps 5] [--seq 128,512,2048] [--batch 1,16]
        [--variants fused,bf16,onnx,mha,gqa]

Shapes (one layer; q/k/v [B, S, H*D] as the projections give them, output [B, S, Hq*D] for o_proj):
  qwen3           16 query heads, 8 kv heads, D 128, causal
  gemma3-sliding  4 query heads, 1 kv head, D 256, bidirectional window 512 (keys i-256 .. i+256)
  gemma3-full     4 query heads, 1 kv head, D 256, bidirectional
Variants:
  onnx   the exporter's `onnx` strategy (export/attention.py) built by the exporter's own code:
         heads-first Transposes, MatMul, additive bias, Softmax, MatMul, Transpose back; the
         [B, 1, S, S] bias is a graph input (the real graph builds it once for all layers)
  fused  the exporter's `fused` strategy: one EncoderAttention node (docs/attention.md), precision f32
  bf16   the same node with precision bf16 (export --attention-precision bf16): q, k, p, v rounded to
         bfloat16, float32 sums; AVX512-BF16 where the CPU has it (the header names the path)
  mha    com.microsoft MultiHeadAttention with the same bias (K/V heads repeated for GQA)
  gqa    com.microsoft GroupQueryAttention (causal only, so qwen3 only; no padding)
Inputs: random q/k/v, no padding (the full work for every variant; padding only shortens ours).
A baseline whose [B, H, S, S] scores exceed --max-score-gb is left out (shown as "-") so the shared
machine does not swap; the fused op never materializes them.

Share of peak: each path's GFLOP/s (4 x D x Hq x the allowed (query, key) pairs per call: q.k and p.v,
a multiply-add counting 2; the tiles' padding and masked products not counted) over its own register peak,
a loop of benchmarks/register_peaks.c compiled and run here: tdpbf16ps tiles (amxbf16), vdpbf16ps zmm
(avx512bf16), vfmadd231ps zmm (avx512, and avx512:bf16, the float tiles on bf16-rounded operands) or ymm
(avx2); the scalar path has none. The path each precision runs is the library's own answer
(customops.attention_path), per shape.

Method: 1 intra-op thread, sequential execution. A round runs every variant once per case, rounds
are interleaved so drifts hit every variant alike, the figure is the median over rounds; ratios
(baseline time / fused time) come from the same run. --clock cpu (default) times the calling
thread's CPU time (a 1-thread ORT session runs in the caller), keeping other processes' load out.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
from onnx import TensorProto

from bitnet_onnx import customops
from bitnet_onnx.arch import FULL, REAL_SHAPES, SLIDING
from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.export.attention import MASKED, AttentionMask, strategy
from bitnet_onnx.export.builder import MS_DOMAIN, GraphBuilder
from bitnet_onnx.testing import factory

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_op import peak_loops, run_peak_loop  # noqa: E402  (the register-peak loops' one reader and runner)



def _attention_shape(arch: str, layer_type: str, bidirectional: bool) -> tuple:
    """(query heads, kv heads, head dim, (keys before, keys after)) of ``arch``'s released model (arch.REAL_SHAPES)
    on ``layer_type`` layers; None in the span = unbounded."""
    cfg = factory.model_config(arch, REAL_SHAPES[arch].config, bidirectional=bidirectional)
    return cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.key_span(layer_type)


SHAPES = {  # name -> _attention_shape: Qwen3-Embedding is causal, the Gemma3 embedding models bidirectional
    "qwen3": _attention_shape("qwen3", FULL, bidirectional=False),
    "gemma3-sliding": _attention_shape("gemma3", SLIDING, bidirectional=True),
    "gemma3-full": _attention_shape("gemma3", FULL, bidirectional=True),
}
FLOAT = TensorProto.FLOAT


class _FedBias(AttentionMask):
    """The strategy's mask with the bias fed as a graph input (built once per model in a real graph)."""

    def additive_bias(self, layer_type: str) -> str:
        return "bias"


def _graph(build) -> bytes:
    b = GraphBuilder()
    for name in ("q", "k", "v"):
        b.add_input(name, FLOAT, ["B", "S", None])
    b.add_input("mask", TensorProto.INT64, ["B", "S"])
    b.add_input("bias", FLOAT, ["B", 1, "S", "S"])
    b.add_output(build(b), "y", FLOAT, ["B", "S", None])
    return b.model("attention").SerializeToString()


def strategy_graph(name: str, hq: int, hkv: int, d: int, span, precision: str = "f32") -> bytes:
    cfg = SimpleNamespace(head_dim=d, n_heads=hq, n_kv_heads=hkv, query_scale=d ** -0.5, key_span=lambda _: span)
    attend = strategy(name, precision)
    return _graph(lambda b: attend(b, "q", "k", "v", "layer", _FedBias(b, "mask", None, cfg)))


def _repeat_heads(b: GraphBuilder, x: str, hkv: int, group: int, d: int) -> str:
    """[B, S, Hkv*D] -> [B, S, Hkv*G*D], each kv head repeated for its G query heads."""
    x = b.op("Unsqueeze", [b.op("Reshape", [x, b.i64([0, 0, hkv, d])]), b.i64([3])])  # [B, S, Hkv, 1, D]
    x = b.op("Expand", [x, b.i64([1, 1, 1, group, 1])])
    return b.op("Reshape", [x, b.i64([0, 0, hkv * group * d])])


def mha_graph(hq: int, hkv: int, d: int, span) -> bytes:
    def build(b):
        k, v = (_repeat_heads(b, x, hkv, hq // hkv, d) for x in ("k", "v"))
        return b.op("MultiHeadAttention", ["q", k, v, "", "", "bias"], domain=MS_DOMAIN, num_heads=hq,
                    scale=d ** -0.5)
    return _graph(build)


def gqa_graph(hq: int, hkv: int, d: int, span) -> bytes:
    def build(b):
        shape = b.op("Shape", ["mask"])
        seqlens = b.op("Cast", [b.op("Sub", [b.op("ReduceSum", ["mask", b.i64([1])], keepdims=0), b.i64(1)])],
                       to=TensorProto.INT32)  # [B]: real tokens - 1
        total = b.op("Cast", [b.op("Gather", [shape, b.i64(1)], axis=0)], to=TensorProto.INT32)
        return b.op("GroupQueryAttention", ["q", "k", "v", "", "", seqlens, total], domain=MS_DOMAIN,
                    num_heads=hq, kv_num_heads=hkv, scale=d ** -0.5)
    return _graph(build)


def variants(shape: str, span) -> dict:
    out = {"onnx": lambda *a: strategy_graph("onnx", *a), "fused": lambda *a: strategy_graph("fused", *a),
           "bf16": lambda *a: strategy_graph("fused", *a, precision="bf16"), "mha": mha_graph}
    if span == (None, 0):
        out["gqa"] = gqa_graph
    return out


def bias_for(mask: np.ndarray, span) -> np.ndarray:
    s = mask.shape[1]
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    allowed = (mask != 0)[:, None, :] & np.ones((s, s), bool)
    if span[0] is not None:
        allowed = allowed & (j >= i - span[0])
    if span[1] is not None:
        allowed = allowed & (j <= i + span[1])
    return np.where(allowed, 0.0, MASKED).astype(np.float32)[:, None]


def attention_path(head_dims=(128, 256)) -> str:
    """The ISA record the op picks here and, per head dim, the tile ops each precision runs, as the library's
    driver decides them (customops.attention_path; a fallback says why)."""
    parts = [f"ISA record {customops.selected_isa()}"]
    for d in sorted(set(head_dims)):
        paths = {p: customops.attention_path(p, d) for p in ("f32", "bf16")}
        text = ", ".join(f"{p} {path.name}" + (f" ({path.fallback})" if path.fallback else "") for p, path in paths.items())
        parts.append(f"D {d}: {text}")
    return "; ".join(parts)


def peak_loop(path: str) -> str | None:
    """The register_peaks.c loop a path is judged against: its own unit ("avx512:bf16" runs avx512's FMAs); None
    where register_peaks.c has none (the scalar tiles)."""
    base = path.split(":")[0]
    return base if base in peak_loops(customops.encoder_attention.NAME) else None


def allowed_pairs(seq: int, span) -> int:
    """(query, key) pairs of one sequence the band allows: keys i - before .. i + after, cut to [0, seq)."""
    i = np.arange(seq)
    lo = np.zeros(seq, np.int64) if span[0] is None else np.maximum(0, i - span[0])
    hi = np.full(seq, seq - 1) if span[1] is None else np.minimum(seq - 1, i + span[1])
    return int((hi - lo + 1).sum())


def share(flops: float, ms: float, peak: float | None) -> str:
    """ "GFLOP/s (% of peak)" of one path."""
    gflops = flops / (ms * 1e-3) / 1e9
    return f"{gflops:.0f}" + (f" ({100 * gflops / peak:.0f}%)" if peak else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=5, help="rounds (2 for batch 16 at S >= 2048)")
    p.add_argument("--seq", default="128,512,2048")
    p.add_argument("--batch", default="1,16")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--max-score-gb", type=float, default=2.0)
    p.add_argument("--variants", default="fused,bf16,onnx,mha,gqa", help="which to run (fused always runs)")
    args = p.parse_args()
    chosen = set(args.variants.split(",")) | {"fused"}
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    options = customops.session_options(threads=1)
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    print(f"# {cpu_name()}; onnxruntime {ort.__version__}; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"# {' '.join(sys.argv)}")
    shapes = args.shapes.split(",")
    print(f"# attention path: {attention_path(SHAPES[s][2] for s in shapes)}")
    paths = {(s, p): customops.attention_path(p, SHAPES[s][2]).name for s in shapes for p in ("f32", "bf16")}
    measured = {loop: run_peak_loop(customops.encoder_attention.NAME, loop)
                for loop in sorted({peak_loop(p) for p in paths.values()} - {None})}
    for loop, (gflops, what) in measured.items():
        print(f"# peak {loop}: " + (f"{gflops:.0f} GFLOP/s" if gflops else "-") + f" ({what}, 1 thread)")
    peaks = {loop: gflops for loop, (gflops, _) in measured.items()}
    print(f"# 1 thread, {args.clock} clock, median of interleaved rounds; ratio = variant time / fused time "
          "(bf16: fused time / bf16 time, its speed-up); bf16 rel = max |bf16 - fused| / max |fused|; "
          "GFLOP/s of the allowed pairs (% of the path's own peak)")
    print("| shape | B | S | fused ms | fused GFLOP/s (% peak) | bf16 ms (x) | bf16 GFLOP/s (% peak) | bf16 rel "
          "| onnx ms (x) | mha ms (x) | gqa ms (x) | max abs diff to onnx |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for shape in shapes:
        hq, hkv, d, span = SHAPES[shape]
        peak_of = {p: peaks.get(peak_loop(paths[shape, p])) for p in ("f32", "bf16")}
        for batch in map(int, args.batch.split(",")):
            for seq in map(int, args.seq.split(",")):
                q = rng.standard_normal((batch, seq, hq * d), dtype=np.float32)
                k = rng.standard_normal((batch, seq, hkv * d), dtype=np.float32)
                v = rng.standard_normal((batch, seq, hkv * d), dtype=np.float32)
                mask = np.ones((batch, seq), np.int64)
                feeds = {"q": q, "k": k, "v": v, "mask": mask, "bias": bias_for(mask, span)}
                score_gb = batch * hq * seq * seq * 4 / 1e9
                sessions = {}
                for name, make in variants(shape, span).items():
                    if name not in chosen or (name not in ("fused", "bf16") and score_gb > args.max_score_gb):
                        continue
                    model = make(hq, hkv, d, span)
                    sess = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
                    names = [i.name for i in sess.get_inputs()]
                    sessions[name] = (sess, {n: feeds[n] for n in names})
                outs = {name: sess.run(None, f)[0] for name, (sess, f) in sessions.items()}  # warm-up
                reps = 2 if batch >= 16 and seq >= 2048 else args.reps
                times = {name: [] for name in sessions}
                for _ in range(reps):
                    for name, (sess, f) in sessions.items():
                        t0 = clock()
                        sess.run(None, f)
                        times[name].append(clock() - t0)
                med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
                flops = 4.0 * d * hq * batch * allowed_pairs(seq, span)
                cols = [f"{med['fused']:.2f}", share(flops, med["fused"], peak_of["f32"])]
                if "bf16" in med:
                    rel = np.abs(outs["bf16"] - outs["fused"]).max() / np.abs(outs["fused"]).max()
                    cols += [f"{med['bf16']:.2f} ({med['fused'] / med['bf16']:.2f}x)",
                             share(flops, med["bf16"], peak_of["bf16"]), f"{rel:.1e}"]
                else:
                    cols += ["-", "-", "-"]
                for name in ("onnx", "mha", "gqa"):
                    cols.append(f"{med[name]:.2f} ({med[name] / med['fused']:.2f}x)" if name in med else "-")
                diff = np.abs(outs["fused"] - outs["onnx"]).max() if "onnx" in outs else float("nan")
                print(f"| {shape} | {batch} | {seq} | " + " | ".join(cols) + f" | {diff:.1e} |", flush=True)
                del sessions, outs


if __name__ == "__main__":
    main()
