"""EncoderAttention through onnxruntime: every attention path this CPU has vs a float64 numpy reference.

Each path is forced with BITNET_ONNX_ISA (read when a session creates the op's kernel): scalar, avx2
(also avxvnni) and avx512 (avx512vnni, amx). Outputs must match to 1e-5 relative (max |error| over
max |reference| per case); one and two threads must give the same bits. Contract: docs/attention.md.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from bitnet_onnx import customops
from bitnet_onnx.customops import DOMAIN as OP_DOMAIN
from bitnet_onnx.customops.encoder_attention import NAME as OP_NAME
from cpu_isas import ALL_ISAS, isas_of_this_cpu

# One BITNET_ONNX_ISA value per attention path this CPU has.
_PATH_OF = {"scalar": "scalar", "avx2": "avx2", "avxvnni": "avx2", "avx512vnni": "avx512", "amx": "avx512"}
ISAS = list({_PATH_OF[isa]: isa for isa in reversed(isas_of_this_cpu()) if isa in _PATH_OF}.values())


def make_model(hq: int, hkv: int, mask_type=TensorProto.INT64, **attrs) -> bytes:
    """One EncoderAttention node; input shapes left open so the op's own checks run."""
    node = helper.make_node(OP_NAME, ["q", "k", "v", "mask"], ["y"], domain=OP_DOMAIN, num_heads=hq,
                            kv_num_heads=hkv, **attrs)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "qkv"]
    inputs.append(helper.make_tensor_value_info("mask", mask_type, None))
    graph = helper.make_graph([node], "attention", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(OP_DOMAIN, customops.DOMAIN_VERSION)])
    model.ir_version = 10
    return model.SerializeToString()


def session(model: bytes, threads: int = 1) -> ort.InferenceSession:
    return ort.InferenceSession(model, customops.session_options(threads=threads), providers=["CPUExecutionProvider"])


def reference(q, k, v, mask, hq, hkv, scale, before=None, after=None):
    """float64 softmax attention over the allowed keys; padded queries and rows without keys give 0."""
    b_n, s_n, _ = q.shape
    d = q.shape[2] // hq
    g = hq // hkv
    qs = (q * np.float32(scale)).astype(np.float64).reshape(b_n, s_n, hq, d)  # the op scales q in float32
    k = k.astype(np.float64).reshape(b_n, s_n, hkv, d)
    v = v.astype(np.float64).reshape(b_n, s_n, hkv, d)
    i, j = np.arange(s_n)[:, None], np.arange(s_n)[None, :]
    band = np.ones((s_n, s_n), bool)
    if before is not None:
        band &= j >= i - before
    if after is not None:
        band &= j <= i + after
    out = np.zeros((b_n, s_n, hq, d))
    for b in range(b_n):
        allowed = band & (mask[b] != 0)[None, :]
        rows = allowed.any(1) & (mask[b] != 0)
        for h in range(hq):
            s = np.where(allowed, qs[b, :, h] @ k[b, :, h // g].T, -np.inf)
            s = s - np.where(rows, s.max(1), 0)[:, None]
            p = np.exp(s)
            p /= np.maximum(p.sum(1, keepdims=True), 1e-300)
            out[b, :, h] = np.where(rows[:, None], p @ v[b, :, h // g], 0)
    return out.reshape(b_n, s_n, hq * d)


def padded_mask(batch: int, seq: int) -> np.ndarray:
    """Row 0 full, then left-padded, right-padded, fully padded and a mask with holes (as many as fit)."""
    mask = np.ones((batch, seq), np.int64)
    kinds = ["left", "right", "empty", "holes"]
    for r in range(1, batch):
        kind = kinds[(r - 1) % 4]
        pad = max(1, seq // 3)
        if kind == "left":
            mask[r, :pad] = 0
        elif kind == "right":
            mask[r, seq - pad:] = 0
        elif kind == "empty":
            mask[r] = 0
        else:
            mask[r, 1::3] = 0
    return mask


def inputs(batch, seq, hq, hkv, d, seed=0):
    rng = np.random.default_rng(seed)
    q = (2 * rng.standard_normal((batch, seq, hq * d))).astype(np.float32)  # peaked rows too
    k = rng.standard_normal((batch, seq, hkv * d)).astype(np.float32)
    v = rng.standard_normal((batch, seq, hkv * d)).astype(np.float32)
    return q, k, v, padded_mask(batch, seq)


def rel_err(got, want) -> float:
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def band_attrs(causal: bool, left: int | None, right: int | None) -> dict:
    attrs = {"causal": int(causal)}
    if left is not None:
        attrs["window_left"] = left
    if right is not None:
        attrs["window_right"] = right
    return attrs


# (batch, seq, hq, hkv, head_dim, causal, window_left, window_right): every band kind, GQA ratio,
# head dim and length of the contract, padding on both sides, fully padded rows and holes.
CASES = [
    (5, 7, 4, 4, 64, False, None, None),
    (5, 7, 4, 2, 128, True, None, None),
    (5, 7, 8, 2, 256, False, 2, 2),
    (2, 1, 16, 1, 64, False, None, None),
    (2, 1, 2, 1, 128, True, None, None),
    (5, 128, 4, 4, 128, True, None, None),
    (5, 128, 16, 8, 64, False, None, None),
    (5, 128, 4, 1, 256, False, 16, 16),          # sliding, window < S
    (3, 128, 16, 1, 64, False, 200, 200),        # sliding, window > S
    (3, 128, 8, 2, 128, True, 40, None),         # causal sliding (window_left only)
    (3, 513, 16, 8, 128, True, None, None),
    (3, 513, 4, 1, 256, False, 256, 256),        # Gemma3's window of 512 (bidirectional)
    (2, 513, 16, 1, 64, False, None, None),
    (2, 513, 4, 4, 64, False, 600, 600),
]


def _case_id(case):
    b, s, hq, hkv, d, causal, left, right = case
    band = "causal" if causal else "bidir"
    if left is not None or right is not None:
        band += f"-win{left},{right}"
    return f"B{b}-S{s}-{hq}x{hkv}-D{d}-{band}"


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_op_matches_reference(isa, case, monkeypatch):
    b, s, hq, hkv, d, causal, left, right = case
    monkeypatch.setenv(customops.ISA_ENV, isa)
    q, k, v, mask = inputs(b, s, hq, hkv, d, seed=s + d)
    scale = d ** -0.5 * 1.25  # not the default: the attribute is used
    model = make_model(hq, hkv, scale=scale, **band_attrs(causal, left, right))
    feeds = {"q": q, "k": k, "v": v, "mask": mask}
    got = session(model, threads=1).run(None, feeds)[0]
    want = reference(q, k, v, mask, hq, hkv, scale, left, 0 if causal else right)
    assert got.shape == q.shape and np.isfinite(got).all()
    assert rel_err(got, want) <= 1e-5
    two = session(model, threads=2).run(None, feeds)[0]
    assert np.array_equal(got, two), "1 and 2 threads differ"


@pytest.mark.parametrize("isa", ISAS)
def test_padded_queries_give_zeros_and_padding_is_exact(isa, monkeypatch):
    """A left- or right-padded row equals the same tokens unpadded; padded positions are 0."""
    monkeypatch.setenv(customops.ISA_ENV, isa)
    hq, hkv, d, n = 4, 2, 64, 70
    q, k, v, _ = inputs(1, n, hq, hkv, d, seed=3)
    sess = session(make_model(hq, hkv, window_left=20, window_right=20))
    alone = sess.run(None, {"q": q, "k": k, "v": v, "mask": np.ones((1, n), np.int64)})[0][0]
    pad = 9
    for side in ("left", "right"):
        cols = slice(pad, pad + n) if side == "left" else slice(0, n)
        qp, kp, vp = (np.zeros((1, n + pad, x.shape[2]), np.float32) + 7.0 for x in (q, k, v))  # junk in padding
        mask = np.zeros((1, n + pad), np.int64)
        qp[0, cols], kp[0, cols], vp[0, cols], mask[0, cols] = q[0], k[0], v[0], 1
        out = sess.run(None, {"q": qp, "k": kp, "v": vp, "mask": mask})[0][0]
        np.testing.assert_array_equal(out[cols], alone)
        assert not out[mask[0] == 0].any()


def test_default_scale_and_head_dim_without_simd_width(monkeypatch):
    """scale absent -> head_dim^-0.5; a head dim no SIMD path divides (24) runs the scalar tiles."""
    monkeypatch.delenv(customops.ISA_ENV, raising=False)
    hq, hkv, d = 6, 3, 24
    q, k, v, mask = inputs(3, 40, hq, hkv, d, seed=5)
    got = session(make_model(hq, hkv, causal=1)).run(None, {"q": q, "k": k, "v": v, "mask": mask})[0]
    assert rel_err(got, reference(q, k, v, mask, hq, hkv, d ** -0.5, None, 0)) <= 1e-5


def test_empty_batch_and_sequence(monkeypatch):
    monkeypatch.delenv(customops.ISA_ENV, raising=False)
    sess = session(make_model(2, 1))
    for b, s in ((0, 5), (2, 0)):
        q = np.zeros((b, s, 2 * 64), np.float32)
        kv = np.zeros((b, s, 64), np.float32)
        out = sess.run(None, {"q": q, "k": kv, "v": kv, "mask": np.ones((b, s), np.int64)})[0]
        assert out.shape == q.shape


# ---------------------------------------------------------------------------------------------
# Bad input: an ORT error naming the node and the tensor/attribute, never a crash


def _feeds(b=2, s=5, hq=4, hkv=2, d=64, **override):
    q, k, v, mask = inputs(b, s, hq, hkv, d)
    feeds = {"q": q, "k": k, "v": v, "mask": mask}
    feeds.update(override)
    return feeds


@pytest.mark.parametrize("override, message", [
    ({"k": np.zeros((2, 5, 3 * 64), np.float32)}, "input 'K' last dimension is 192"),
    ({"v": np.zeros((2, 5, 64), np.float32)}, "input 'V' last dimension is 64"),
    ({"v": np.zeros((3, 5, 128), np.float32)}, "input 'V' has shape [3, 5, 128]"),
    ({"k": np.zeros((2, 4, 128), np.float32)}, "input 'K' has shape [2, 4, 128]"),
    ({"mask": np.ones((2, 6), np.int64)}, "input 'attention_mask' has shape [2, 6]"),
    ({"mask": np.ones((10,), np.int64)}, "input 'attention_mask' must be 2-D"),
    ({"q": np.zeros((2, 5, 250), np.float32)}, "input 'Q' last dimension 250 is not num_heads (4)"),
    ({"q": np.zeros((10, 256), np.float32)}, "input 'Q' must be 3-D"),
])
def test_error_shapes(override, message, monkeypatch):
    monkeypatch.delenv(customops.ISA_ENV, raising=False)
    with pytest.raises(Exception) as err:
        session(make_model(4, 2)).run(None, _feeds(**override))
    assert message in str(err.value) and "EncoderAttention node" in str(err.value), str(err.value)


def test_error_mask_dtype(monkeypatch):
    """An int32 mask is refused (at load, by the op's declared input type), not reinterpreted."""
    monkeypatch.delenv(customops.ISA_ENV, raising=False)
    with pytest.raises(Exception) as err:
        sess = session(make_model(4, 2, mask_type=TensorProto.INT32))
        sess.run(None, _feeds(mask=np.ones((2, 5), np.int32)))
    assert "int32" in str(err.value) or "INT32" in str(err.value), str(err.value)


@pytest.mark.parametrize("attrs, message", [
    ({"hq": 4, "hkv": 3}, "must be a multiple of 'kv_num_heads'"),
    ({"hq": 0, "hkv": 1}, "'num_heads' must be set to a positive int"),
    ({"hq": 4, "hkv": 2, "window_left": -1}, "'window_left' must be >= 0"),
    ({"hq": 4, "hkv": 2, "causal": 2}, "'causal' must be 0 or 1"),
    ({"hq": 4, "hkv": 2, "scale": float("inf")}, "'scale' must be finite"),
])
def test_error_attributes(attrs, message, monkeypatch):
    monkeypatch.delenv(customops.ISA_ENV, raising=False)
    with pytest.raises(Exception) as err:
        session(make_model(**attrs))
    assert message in str(err.value), str(err.value)


@pytest.mark.parametrize("isa", ["nonesuch"] + [isa for isa in ALL_ISAS if isa not in isas_of_this_cpu()])
def test_error_isa_unknown_or_missing(isa, monkeypatch):
    monkeypatch.setenv(customops.ISA_ENV, isa)
    with pytest.raises(Exception) as err:
        session(make_model(4, 2))
    assert f"BITNET_ONNX_ISA={isa}" in str(err.value), str(err.value)
