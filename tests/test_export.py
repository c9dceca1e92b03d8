"""Exported graphs against transformers (f32) and the BitLinear reference (i2s, int8, nbits), on tiny
generated models: padding sides, batch vs one-at-a-time, sliding windows, bidirectional Gemma3,
Qwen3's EOS rule, Dense + Normalize, pooling modes, external data, allowed ops."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bitnet_onnx import customops
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.customops import DOMAIN as OP_DOMAIN
from bitnet_onnx.export import writer
from bitnet_onnx.export.exporter import export
from bitnet_onnx.manifest import Manifest
from bitnet_onnx.reference import Reference

ALLOWED_DOMAINS = {"", "com.microsoft", OP_DOMAIN}


# -- helpers ---------------------------------------------------------------------------------------
def session(folder):
    manifest = Manifest.read(folder)
    options = customops.session_options() if manifest.needs_custom_ops else ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])


def run(sess, ids, mask):
    return sess.run(["sentence_embedding", "token_embeddings"], {"input_ids": ids, "attention_mask": mask})


def cosines(a, b):
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def batch(lengths, seq, side="right", seed=0, vocab=500):
    """Random ids padded to ``seq`` on ``side``; the same rows for either side."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), seq), np.int64)
    mask = np.zeros((len(lengths), seq), np.int64)
    for r, n in enumerate(lengths):
        row = rng.integers(3, vocab, n)
        cols = slice(seq - n, seq) if side == "left" else slice(0, n)
        ids[r, cols], mask[r, cols] = row, 1
    return ids, mask


def real_tokens(tokens, mask):
    return [t[m.astype(bool)] for t, m in zip(tokens, mask)]


# -- f32 against transformers ------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("side", ["right", "left"])
def test_f32_standard_model_matches_transformers(tiny_model, tiny_export, arch, side):
    model = tiny_model(arch, bitnet=False)
    out = tiny_export(model, "f32")
    ids, mask = batch([20, 13, 5], 20, side)  # gemma3 tiny window is 8: rows cross it
    sent, tokens = run(session(out), ids, mask)
    ref_sent, ref_tokens = Reference(model).encode(ids, mask)
    assert cosines(sent, ref_sent).min() >= 0.99999
    for got, want in zip(real_tokens(tokens, mask), real_tokens(ref_tokens, mask)):
        assert cosines(got, want).min() >= 0.99999


def test_f32_bitnet_is_the_fake_quant_reference(tiny_model, tiny_export):
    model = tiny_model("gemma3")
    ids, mask = batch([16, 9], 16)
    for weights in ("f32", "f16"):
        sent, _ = run(session(tiny_export(model, weights)), ids, mask)
        ref, _ = Reference(model, activations="float").encode(ids, mask)
        assert cosines(sent, ref).min() >= 0.99999, weights


# -- i2s / int8 / nbits against the BitLinear reference ----------------------------------------------
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_i2s_matches_bitlinear_reference(tiny_model, tiny_export, arch):
    model = tiny_model(arch)
    out = tiny_export(model)
    assert Manifest.read(out).weights == "i2s"
    ids, mask = batch([24, 17, 6, 1], 24, "left")
    sent, tokens = run(session(out), ids, mask)
    ref_sent, ref_tokens = Reference(model).encode(ids, mask)
    assert cosines(sent, ref_sent).min() >= 0.9999
    for got, want in zip(real_tokens(tokens, mask), real_tokens(ref_tokens, mask)):
        assert np.median(cosines(got, want)) >= 0.9999


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_int8_equals_i2s(tiny_model, tiny_export, arch):
    model = tiny_model(arch)
    ids, mask = batch([18, 11, 4], 18)
    i2s_sent, i2s_tokens = run(session(tiny_export(model, "i2s")), ids, mask)
    int8_sent, int8_tokens = run(session(tiny_export(model, "int8")), ids, mask)
    assert not Manifest.read(tiny_export(model, "int8")).needs_custom_ops
    assert np.abs(int8_sent - i2s_sent).max() <= 1e-4
    m = mask[..., None].astype(bool)
    scale = np.abs(i2s_tokens * m).max()
    assert np.abs((int8_tokens - i2s_tokens) * m).max() <= 1e-4 * scale


@pytest.mark.parametrize("bits", [2, 4])
def test_nbits_holds_the_ternary_weights(tiny_model, tiny_export, bits):
    model = tiny_model("qwen3")
    out = tiny_export(model, "nbits", bits=bits)
    manifest = Manifest.read(out)
    assert manifest.nbits == bits and not manifest.needs_custom_ops
    assert manifest.min_onnxruntime == ("1.24" if bits == 2 else "1.21")  # 2-bit MatMulNBits: ORT >= 1.24
    ids, mask = batch([12, 7], 12)
    sent, _ = run(session(out), ids, mask)
    ref, _ = Reference(model).encode(ids, mask)
    # MatMulNBits quantizes activations per 128-block (accuracy_level 4), not per token: close, not equal
    assert cosines(sent, ref).min() >= 0.999


def test_standard_model_ternarized_is_a_stand_in(tiny_model, tiny_export):
    model = tiny_model("qwen3", bitnet=False)
    out = tiny_export(model, "i2s", ternarize=True)
    assert Manifest.read(out).ternarized
    ids, mask = batch([10, 6], 10)
    sent, _ = run(session(out), ids, mask)
    ref, _ = Reference(model, ternarize=True).encode(ids, mask)
    assert cosines(sent, ref).min() >= 0.9999


# -- padding and batching ---------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("weights", ["i2s", "f32"])
def test_padding_sides_and_batch_equal_one_at_a_time(tiny_model, tiny_export, arch, weights):
    model = tiny_model(arch)
    sess = session(tiny_export(model, weights))
    lengths = [21, 3, 14, 1]
    right = run(sess, *batch(lengths, 21, "right"))
    left = run(sess, *batch(lengths, 21, "left"))
    ids, mask = batch(lengths, 21, "right")
    for r, n in enumerate(lengths):
        alone_sent, alone_tokens = run(sess, ids[r:r + 1, :n], mask[r:r + 1, :n])
        np.testing.assert_allclose(right[0][r], alone_sent[0], atol=2e-5)
        np.testing.assert_allclose(left[0][r], alone_sent[0], atol=2e-5)
        np.testing.assert_allclose(right[1][r, :n], alone_tokens[0], atol=2e-4, rtol=1e-4)
        np.testing.assert_allclose(left[1][r, 21 - n:], alone_tokens[0], atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_pooling_modes_with_left_padding(tiny_model, tiny_export, pooling):
    model = tiny_model("gemma3", pooling=pooling)
    out = tiny_export(model)
    assert Manifest.read(out).pooling == pooling
    ids, mask = batch([9, 4], 9, "left")
    sent, tokens = run(session(out), ids, mask)
    ref, _ = Reference(model).encode(ids, mask)
    assert cosines(sent, ref).min() >= 0.9999
    alone, _ = run(session(out), ids[1:, 5:], mask[1:, 5:])
    np.testing.assert_allclose(sent[1], alone[0], atol=2e-5)


# -- Gemma3 attention patterns -----------------------------------------------------------------------
def test_gemma3_sliding_window_is_applied(tiny_model, tiny_export):
    """A 40-token input over a window of 8: matches HF, and the window changes the result."""
    narrow, wide = tiny_model("gemma3", bitnet=False), tiny_model("gemma3", bitnet=False, sliding_window=64)
    ids, mask = batch([40], 40)
    got, tokens = run(session(tiny_export(narrow, "f32")), ids, mask)
    ref, ref_tokens = Reference(narrow).encode(ids, mask)
    assert cosines(got, ref).min() >= 0.99999
    assert np.abs(tokens - ref_tokens).max() <= 1e-3 * np.abs(ref_tokens).max()  # a window off by one is ~1
    got_wide, _ = run(session(tiny_export(wide, "f32")), ids, mask)
    assert cosines(got, got_wide).min() < 0.9999  # same weights (same seed), only the window differs


def test_gemma3_bidirectional(tiny_model, tiny_export):
    model = tiny_model("gemma3", bidirectional=True)
    out = tiny_export(model)
    ids, mask = batch([30, 12, 5], 30, "right")
    sent, tokens = run(session(out), ids, mask)
    ref_sent, ref_tokens = Reference(model).encode(ids, mask)
    assert cosines(sent, ref_sent).min() >= 0.9999
    # the first token sees later tokens: changing the last token changes it
    ids2 = ids.copy()
    ids2[0, 29] = 3 if ids[0, 29] != 3 else 4
    _, tokens2 = run(session(out), ids2, mask)
    assert np.abs(tokens2[0, 0] - tokens[0, 0]).max() > 1e-4
    left = run(session(out), *batch([30, 12, 5], 30, "left"))
    np.testing.assert_allclose(left[0], sent, atol=2e-5)


def test_standard_gemma3_bidirectional_f32_matches_transformers(tiny_model, tiny_export):
    model = tiny_model("gemma3", bitnet=False, bidirectional=True)
    ids, mask = batch([30, 11], 30, "right")
    got, tokens = run(session(tiny_export(model, "f32")), ids, mask)
    ref, ref_tokens = Reference(model).encode(ids, mask)
    assert cosines(got, ref).min() >= 0.99999
    m = mask[..., None]  # HF's bidirectional window is |i - j| <= W // 2: off by one changes tokens by ~1
    assert np.abs((tokens - ref_tokens) * m).max() <= 1e-3 * np.abs(ref_tokens * m).max()


# -- sentence-transformers modules and tokenizer rules ------------------------------------------------
def test_dense_and_normalize(tiny_model, tiny_export):
    model = tiny_model("gemma3", dense=True, normalize=True)
    out = tiny_export(model)
    manifest = Manifest.read(out)
    assert manifest.normalize and manifest.dimension == 96 and manifest.hidden_size == 128
    ids, mask = batch([11, 6], 11)
    sent, tokens = run(session(out), ids, mask)
    assert sent.shape == (2, 96) and tokens.shape == (2, 11, 128)
    np.testing.assert_allclose(np.linalg.norm(sent, axis=1), 1.0, atol=1e-5)
    ref, _ = Reference(model).encode(ids, mask)
    assert cosines(sent, ref).min() >= 0.9999


def test_without_normalize_module(tiny_model, tiny_export):
    model = tiny_model("qwen3", normalize=False)
    out = tiny_export(model)
    assert not Manifest.read(out).normalize
    sent, _ = run(session(out), *batch([7], 7))
    assert abs(np.linalg.norm(sent[0]) - 1.0) > 1e-3


def test_qwen3_eos_rule_and_last_token(tiny_model, tiny_export):
    from tokenizers import Tokenizer

    from bitnet_onnx.runtime.tokenization import TextTokenizer

    model = tiny_model("qwen3", normalize=False)
    out = tiny_export(model)
    eos = Tokenizer.from_file(str(model / "tokenizer.json")).token_to_id("<|endoftext|>")
    assert eos is not None and Manifest.read(out).append_eos_token_id == eos
    ids, mask = TextTokenizer.from_folder(out).encode(["a longer text with several words", "hi"])
    for row, m in zip(ids, mask):
        assert row[m.astype(bool)][-1] == eos
    sent, tokens = run(session(out), ids, mask)
    for r in range(2):
        last = np.flatnonzero(mask[r])[-1]
        np.testing.assert_allclose(sent[r], tokens[r, last], atol=1e-6)


def test_tokenizer_files_and_manifest(tiny_model, tiny_export):
    model = tiny_model("gemma3", padding_side="left")
    out = tiny_export(model)
    assert (out / "tokenizer.json").read_bytes() == (model / "tokenizer.json").read_bytes()
    manifest = json.loads((out / "bitnet_onnx.json").read_text())
    assert manifest["padding_side"] == "left" and manifest["append_eos_token_id"] is None
    assert manifest["max_length"] == 256 and manifest["prompts"]["query"].startswith("task:")
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


# -- the graph itself ---------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", ["i2s", "f32", "f16", "int8", "nbits"])
def test_graph_is_checked_and_uses_cpu_ops_only(tiny_model, tiny_export, weights):
    out = tiny_export(tiny_model("gemma3"), weights)
    model = onnx.load(str(out / "model.onnx"))
    customops.register_onnx_schema()
    onnx.checker.check_model(model, full_check=True)
    assert {n.domain for n in model.graph.node} <= ALLOWED_DOMAINS
    assert not {"ArgMax", "ArgMin"} & {n.op_type for n in model.graph.node}  # int64 ArgMax: no ORT CPU kernel
    assert ("I2STernaryMatMul" in {n.op_type for n in model.graph.node}) == (weights == "i2s")
    assert {i.name for i in model.graph.input} == {"input_ids", "attention_mask"}
    for vi in model.graph.input:
        assert [d.dim_param for d in vi.type.tensor_type.shape.dim] == ["batch", "sequence"]
    table = next(t for t in model.graph.initializer if t.name.startswith("/embed_tokens/"))
    assert table.data_type == onnx.TensorProto.FLOAT16
    session(out)  # ORT_ENABLE_ALL


def test_config_v4_and_v5_export_the_same_graph(tiny_model, tiny_export):
    ids, mask = batch([12, 5], 12)
    results = []
    for style in ("v4", "v5"):
        model = tiny_model("gemma3", config_style=style)
        results.append(run(session(tiny_export(model)), ids, mask)[0])
    np.testing.assert_array_equal(results[0], results[1])


def test_large_models_use_one_external_data_file(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "EXTERNAL_DATA_THRESHOLD", 1 << 16)
    out = export(tiny_model("qwen3"), tmp_path / "ext")
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("model.onnx")) == \
        ["model.onnx", writer.EXTERNAL_DATA_NAME]
    assert (out / "model.onnx").stat().st_size < 1 << 16
    ids, mask = batch([6], 6)
    sent, _ = run(session(out), ids, mask)
    inline = export(tiny_model("qwen3"), tmp_path / "inline")
    ref, _ = run(session(inline), ids, mask)
    np.testing.assert_array_equal(sent, ref)
    # the writer streams the weights into the file as the graph is built (writer.WeightFile): the same
    # files as onnx's own save of the whole graph, and the same graph as the inline export
    whole = onnx.load(str(out / "model.onnx"))
    assert whole == onnx.load(str(inline / "model.onnx"))
    resaved = tmp_path / "onnx-save"
    resaved.mkdir()
    onnx.save_model(whole, str(resaved / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=writer.EXTERNAL_DATA_NAME, size_threshold=writer.EXTERNAL_TENSOR_MIN_BYTES)
    for name in ("model.onnx", writer.EXTERNAL_DATA_NAME):
        assert (resaved / name).read_bytes() == (out / name).read_bytes(), name


@pytest.mark.parametrize("keep", [True, False], ids=["external", "inlined"])
def test_weight_file_writes_every_dtype_back_to_back(tmp_path, keep):
    """writer.WeightFile on each dtype an initializer may have (bfloat16 included: ml_dtypes' arrays have no
    buffer format): a tensor of 1 KiB or more goes to the file at the next offset with its exact bytes, a
    smaller one stays inline; when the total is at most the threshold, every tensor comes back inline with
    the bytes ``tobytes`` gives, and the file is removed."""
    import ml_dtypes

    dtypes = (np.float32, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int32, np.int64)
    arrays = [(np.arange(n, dtype=np.float32) % 100).astype(d).reshape(2, -1)
              for d in dtypes for n in (512, 1024 // np.dtype(d).itemsize)]
    arrays.append(np.ones(3, np.float32))  # small: inline
    tensors = [onnx.TensorProto(name=f"t{i}") for i in range(len(arrays))]
    with writer.WeightFile(tmp_path) as weights:
        taken = [weights.add(t, a) for t, a in zip(tensors, arrays)]
    assert taken == [a.nbytes >= writer.EXTERNAL_TENSOR_MIN_BYTES for a in arrays] and taken[-1] is False
    total = sum(a.nbytes for a in arrays)  # under the threshold
    weights.inline_if_small(writer.EXTERNAL_DATA_THRESHOLD + 1 if keep else total)
    data = (tmp_path / writer.EXTERNAL_DATA_NAME).read_bytes() if keep else b""
    assert (tmp_path / writer.EXTERNAL_DATA_NAME).exists() == keep
    offset = 0
    for t, a, external in zip(tensors, arrays, taken):
        if keep and external:
            where = {e.key: e.value for e in t.external_data}
            assert where == {"location": writer.EXTERNAL_DATA_NAME, "offset": str(offset), "length": str(a.nbytes)}
            assert t.data_location == onnx.TensorProto.EXTERNAL and not t.HasField("raw_data")
            assert data[offset:offset + a.nbytes] == a.tobytes()
            offset += a.nbytes
        else:
            assert t.data_location == onnx.TensorProto.DEFAULT and not t.external_data
            assert t.raw_data == (a.tobytes() if external else b"")  # the builder fills the small ones itself
    assert len(data) == offset


def test_overwrite(tiny_model, tmp_path):
    from bitnet_onnx.errors import BitnetOnnxError

    out = export(tiny_model("qwen3"), tmp_path / "o", weights="f32")
    with pytest.raises(BitnetOnnxError, match="already exists"):
        export(tiny_model("qwen3"), out)
    export(tiny_model("qwen3"), out, weights="int8", overwrite=True)
    assert Manifest.read(out).weights == "int8"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]
