"""Attention core alternatives on ORT's CPU EP at 1 thread (the choice behind export/layers.py).

    /work/venv-warm/bin/python benchmarks/bench_attention.py [--reps 7]

Inputs q [B, H, S, hd], k/v [B, KV, S, hd], an additive mask [B, 1, S, S] (causal + left padding on row 0).
Variants: 5-D broadcast GQA (MatMul/Softmax), 4-D grouped GQA (query heads of a kv head stacked along the
sequence axis; what the exporter emits), ONNX Attention-23, com.microsoft MultiHeadAttention (K/V repeated).
Prints per shape the median time of interleaved repetitions, the ratio to 5-D, and max |diff| to 5-D on
unpadded rows.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

SHAPES = {"qwen3-0.6b": (16, 8, 128), "gemma3-270m": (4, 1, 256)}
BATCHES = ((1, 512), (8, 128), (32, 32))


def _model(nodes, opset, ms=False, consts=None):
    nodes = [helper.make_node("Constant", [], [n], value=helper.make_tensor(n, TensorProto.INT64, [len(v)], v))
             for n, v in (consts or {}).items()] + nodes
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("q", "k", "v", "bias")]
    graph = helper.make_graph(nodes, "attention", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model.SerializeToString()


def gqa_5d(h, kv, hd):
    n = helper.make_node
    return _model([
        n("Reshape", ["q", "s5"], ["q5"]), n("Unsqueeze", ["k", "a2"], ["k5"]),
        n("Transpose", ["k5"], ["kt"], perm=[0, 1, 2, 4, 3]), n("MatMul", ["q5", "kt"], ["sc"]),
        n("Unsqueeze", ["bias", "a2"], ["b5"]), n("Add", ["sc", "b5"], ["m"]), n("Softmax", ["m"], ["p"], axis=-1),
        n("Unsqueeze", ["v", "a2"], ["v5"]), n("MatMul", ["p", "v5"], ["c"]), n("Reshape", ["c", "s4"], ["y"]),
    ], 21, consts={"s5": [0, kv, h // kv, -1, hd], "a2": [2], "s4": [0, h, -1, hd]})


def gqa_4d(h, kv, hd):
    n = helper.make_node
    return _model([
        n("Reshape", ["q", "sg"], ["qg"]), n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["qg", "kt"], ["sc"]), n("Reshape", ["sc", "sh"], ["sc4"]), n("Add", ["sc4", "bias"], ["m"]),
        n("Softmax", ["m"], ["p"], axis=-1), n("Reshape", ["p", "sk"], ["pg"]), n("MatMul", ["pg", "v"], ["c"]),
        n("Reshape", ["c", "s4"], ["y"]),
    ], 21, consts={"sg": [0, kv, -1, hd], "sh": [0, h, -1, 0], "sk": [0, kv, -1, 0], "s4": [0, h, -1, hd]})


def attention23(h, kv, hd):
    return _model([helper.make_node("Attention", ["q", "k", "v", "bias"], ["y"], scale=1.0)], 23)


def mha(h, kv, hd):
    n = helper.make_node
    nodes = []
    for x in "kv":  # repeat each kv head for its query heads, then [B, S, H*hd]
        nodes += [n("Unsqueeze", [x, "a2"], [x + "5"]), n("Expand", [x + "5", "e"], [x + "e"]),
                  n("Reshape", [x + "e", "s4"], [x + "4"]), n("Transpose", [x + "4"], [x + "t"], perm=[0, 2, 1, 3]),
                  n("Reshape", [x + "t", "sq"], [x + "3"])]
    nodes += [n("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]), n("Reshape", ["qt", "sq"], ["q3"]),
              n("MultiHeadAttention", ["q3", "k3", "v3", "", "", "bias"], ["y3"], domain="com.microsoft",
                num_heads=h, scale=1.0),
              n("Reshape", ["y3", "s4b"], ["y4"]), n("Transpose", ["y4"], ["y"], perm=[0, 2, 1, 3])]
    return _model(nodes, 21, ms=True, consts={"a2": [2], "e": [1, 1, h // kv, 1, 1], "s4": [0, h, -1, hd],
                                              "sq": [0, 0, h * hd], "s4b": [0, 0, h, hd]})


VARIANTS = {"gqa_5d": gqa_5d, "gqa_4d": gqa_4d, "attention23": attention23, "mha": mha}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    print(f"# onnxruntime {ort.__version__}, 1 thread, median of {args.reps} interleaved reps; ratio to gqa_5d")
    for name, (h, kv, hd) in SHAPES.items():
        for b, s in BATCHES:
            q = rng.standard_normal((b, h, s, hd), dtype=np.float32)
            k = rng.standard_normal((b, kv, s, hd), dtype=np.float32)
            v = rng.standard_normal((b, kv, s, hd), dtype=np.float32)
            keys = np.ones((b, s), bool)
            keys[0, : s // 3] = False
            allowed = np.tril(np.ones((s, s), bool))[None] & keys[:, None, :]
            bias = np.where(allowed, 0, np.finfo(np.float32).min).astype(np.float32)[:, None]
            feeds = {"q": q, "k": k, "v": v, "bias": bias}
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            sessions = {v_: ort.InferenceSession(make(h, kv, hd), options, providers=["CPUExecutionProvider"])
                        for v_, make in VARIANTS.items()}
            outs = {v_: sess.run(None, feeds)[0] for v_, sess in sessions.items()}
            times = {v_: [] for v_ in sessions}
            for _ in range(args.reps):
                for v_, sess in sessions.items():
                    t0 = time.perf_counter()
                    sess.run(None, feeds)
                    times[v_].append(time.perf_counter() - t0)
            base = statistics.median(times["gqa_5d"])
            cols = []
            for v_ in sessions:
                med = statistics.median(times[v_])
                err = np.abs(outs[v_][1:] - outs["gqa_5d"][1:]).max() if b > 1 else np.abs(outs[v_] - outs["gqa_5d"])[:, :, s // 3:].max()
                cols.append(f"{v_} {med * 1e3:7.2f} ms ({med / base:.2f}x, diff {err:.0e})")
            print(f"{name:12} B={b:<3} S={s:<4} " + " | ".join(cols), flush=True)


if __name__ == "__main__":
    main()
