"""The ``--weights int8`` projection: per-token int8 activations x exact ternary int8 weights, ORT-native.

    python benchmarks/bench_int8_projection.py [--m 512 --k 1024 --n 3072] [--reps 21]

Compares, at 1 thread, one projection X [M, K] -> [M, N] (the same quantization ops in front of each):
  s8s8_mmi     int8 codes, MatMulInteger int8 x int8, Cast, / a, * s_w
  u8s8_mmi     codes + 128 as uint8, MatMulInteger with zero point 128, Cast, / a, * s_w
  u8s8_mitf    codes + 128 as uint8, com.microsoft MatMulIntegerToFloat (scales 1), / a, * s_w  (exported)
  dqmm         com.microsoft DynamicQuantizeMatMul (per-tensor uint8 activations: NOT per token)
  f32          MatMul with s_w * T
Prints the median of interleaved repetitions (the order rotating every repetition), the ratio to u8s8_mitf,
and whether the output is bit-identical to s8s8_mmi (the exact per-token numerics).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from bitnet_onnx.bench.host import cpu_name
from bitnet_onnx.bench.timing import interleave


def build(nodes, inits, ms=False) -> bytes:
    graph = helper.make_graph(nodes, "proj", [helper.make_tensor_value_info("x", T.FLOAT, None)],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model.SerializeToString()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=512)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--n", type=int, default=3072)
    p.add_argument("--reps", type=int, default=21)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    t = rng.integers(-1, 2, (args.k, args.n)).astype(np.int8)
    s_w = np.float32(0.02)
    n = helper.make_node

    def c(name, value, dtype=np.float32):
        return numpy_helper.from_array(np.asarray(value, dtype), name)

    quant = [n("Abs", ["x"], ["ax"]), n("ReduceMax", ["ax", "axes"], ["am"], keepdims=1), n("Max", ["am", "eps"], ["amc"]),
             n("Div", ["c127", "amc"], ["a"]), n("Mul", ["x", "a"], ["xa"]), n("Round", ["xa"], ["r"]),
             n("Clip", ["r", "lo", "hi"], ["q"])]
    consts = [c("axes", [-1], np.int64), c("eps", 1e-5), c("c127", 127.0), c("lo", -128.0), c("hi", 127.0),
              c("sw", s_w), c("c128", 128.0), c("one", 1.0), c("zp", 128, np.uint8), numpy_helper.from_array(t, "W")]
    unsigned = [n("Add", ["q", "c128"], ["qu"]), n("Cast", ["qu"], ["codes"], to=T.UINT8)]
    rescale = [n("Div", ["sf", "a"], ["d"]), n("Mul", ["d", "sw"], ["y"])]
    models = {
        "s8s8_mmi": build(quant + [n("Cast", ["q"], ["codes"], to=T.INT8), n("MatMulInteger", ["codes", "W"], ["s"]),
                                   n("Cast", ["s"], ["sf"], to=T.FLOAT)] + rescale, consts),
        "u8s8_mmi": build(quant + unsigned + [n("MatMulInteger", ["codes", "W", "zp"], ["s"]),
                                              n("Cast", ["s"], ["sf"], to=T.FLOAT)] + rescale, consts),
        "u8s8_mitf": build(quant + unsigned + [n("MatMulIntegerToFloat", ["codes", "W", "one", "one", "zp"], ["sf"],
                                                 domain="com.microsoft")] + rescale, consts, ms=True),
        "dqmm": build([n("DynamicQuantizeMatMul", ["x", "W", "bs"], ["y"], domain="com.microsoft")],
                      [numpy_helper.from_array(t, "W"), c("bs", [s_w])], ms=True),
        "f32": build([n("MatMul", ["x", "Wf"], ["y"])], [numpy_helper.from_array(t.astype(np.float32) * s_w, "Wf")]),
    }
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sessions = {k: ort.InferenceSession(m, options, providers=["CPUExecutionProvider"]) for k, m in models.items()}
    x = rng.standard_normal((args.m, args.k), dtype=np.float32)
    outs = {k: s.run(None, {"x": x})[0] for k, s in sessions.items()}

    def seconds(k: str, _cell) -> float:
        t0 = time.perf_counter()
        sessions[k].run(None, {"x": x})
        return time.perf_counter() - t0

    times = interleave(list(sessions), [None], args.reps, seconds)
    base = statistics.median(times[("u8s8_mitf", None)])
    print(f"# {cpu_name()}, onnxruntime {ort.__version__}, 1 thread, M={args.m} K={args.k} N={args.n}, "
          f"median of {args.reps}")
    for k in sessions:
        med = statistics.median(times[(k, None)])
        exact = np.array_equal(outs[k], outs["s8s8_mmi"])
        print(f"{k:10} {med * 1e3:8.2f} ms  {med / base:5.2f}x  bit-exact per-token: {exact}")


if __name__ == "__main__":
    main()
