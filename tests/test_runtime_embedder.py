"""Embedder on real exports of factory models: order, shapes, batching, prompts, dimensions, threads, errors."""

import json

import numpy as np
import pytest

from bitnet_onnx import Embedder
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.runtime.tokenization import TextTokenizer

TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "a",
    "",
    "What is the capital of France? Paris is the capital and largest city of France.",
    "Ternary weights",
    "Emoji and symbols: 🙂 🚀 ✓ → €",
    "How many legs does a spider have?",
]


@pytest.fixture(scope="module")
def exports(tiny_model, tiny_export):
    """Exported folders: Qwen3 (last token, right and left padding), Gemma3 (mean, Dense head, no normalize)."""
    out = {}
    specs = {
        "qwen3": dict(arch="qwen3"),
        "qwen3-left": dict(arch="qwen3", padding_side="left"),
        "gemma3": dict(arch="gemma3", dense=True, normalize=False),
    }
    for name, kw in specs.items():
        model = tiny_model(**kw)
        out[name] = tiny_export(model, "i2s")
        out[name + "/hf"] = model
    return out


@pytest.fixture(scope="module")
def embedders(exports):
    return {name: Embedder(exports[name], threads=1) for name in ("qwen3", "qwen3-left", "gemma3")}


@pytest.mark.parametrize("name", ["qwen3", "qwen3-left", "gemma3"])
def test_batched_equals_one_at_a_time_in_input_order(embedders, name):
    e = embedders[name]
    batched = e.encode(TEXTS, batch_size=3)
    assert batched.shape == (len(TEXTS), e.dimension) and batched.dtype == np.float32
    assert batched.flags.c_contiguous and np.isfinite(batched).all()
    single = np.stack([e.encode(t) for t in TEXTS])
    np.testing.assert_allclose(batched, single, rtol=0, atol=2e-5)
    # rows differ from each other, so the order check above is meaningful
    assert np.linalg.matrix_rank(single) == len(TEXTS)


def test_padding_side_does_not_change_embeddings(embedders):
    right = embedders["qwen3"].encode(TEXTS, batch_size=4)
    left = embedders["qwen3-left"].encode(TEXTS, batch_size=4)
    np.testing.assert_allclose(left, right, rtol=0, atol=2e-5)


def test_matches_pytorch_reference(exports, embedders):
    pytest.importorskip("torch")
    from bitnet_onnx.reference import Reference

    for name in ARCHITECTURES:
        ref = Reference(exports[name + "/hf"])
        got = embedders[name].encode(TEXTS, batch_size=3)
        tok = TextTokenizer.from_folder(embedders[name].folder)
        for text, g in zip(TEXTS, got):
            ids, mask = tok.encode([text])
            want = ref.encode(ids, mask)[0][0]
            cos = float(g @ want / (np.linalg.norm(g) * np.linalg.norm(want)))
            assert cos > 0.999, (name, text, cos)


def test_single_string_empty_list_and_empty_string(embedders):
    e = embedders["qwen3"]
    one = e.encode("hello world")
    assert one.shape == (e.dimension,) and one.dtype == np.float32
    np.testing.assert_array_equal(one, e.encode(["hello world"])[0])
    empty = e.encode([])
    assert empty.shape == (0, e.dimension) and empty.dtype == np.float32
    blank = e.encode("")
    assert np.isfinite(blank).all() and abs(np.linalg.norm(blank) - 1) < 1e-5


def test_prompts(exports, embedders, private_copy):
    e = embedders["qwen3"]
    prompts = e.prompts
    assert "query" in prompts and prompts["query"]
    text = "capital of France"
    np.testing.assert_array_equal(e.encode(text, prompt_name="query"), e.encode(prompts["query"] + text))
    np.testing.assert_array_equal(e.encode(text, prompt="passage: "), e.encode("passage: " + text))
    assert not np.allclose(e.encode(text, prompt_name="query"), e.encode(text))
    with pytest.raises(BitnetOnnxError, match="prompt_name 'nope'.*query"):
        e.encode(text, prompt_name="nope")
    # default_prompt_name from the manifest applies when no prompt is given
    folder = private_copy(exports["qwen3"], "default-prompt")
    manifest = json.loads((folder / "bitnet_onnx.json").read_text())
    manifest["default_prompt_name"] = "query"
    (folder / "bitnet_onnx.json").write_text(json.dumps(manifest))
    d = Embedder(folder, threads=1)
    np.testing.assert_array_equal(d.encode(text), e.encode(text, prompt_name="query"))
    np.testing.assert_array_equal(d.encode(text, prompt=""), e.encode(text))


def test_encode_query_and_document_use_named_prompts(embedders):
    e = embedders["qwen3"]
    text = "capital of France"
    np.testing.assert_array_equal(e.encode_query(text), e.encode(text, prompt_name="query"))
    np.testing.assert_array_equal(e.encode_document([text]), e.encode([text], prompt_name="document"))
    np.testing.assert_array_equal(e.encode_query(text, prompt="x: "), e.encode("x: " + text))


def test_dimensions_truncate_then_renormalize(embedders):
    e = embedders["qwen3"]
    full = e.encode(TEXTS)
    short = e.encode(TEXTS, dimensions=32)
    assert short.shape == (len(TEXTS), 32)
    want = full[:, :32] / np.linalg.norm(full[:, :32], axis=1, keepdims=True)
    np.testing.assert_allclose(short, want, rtol=0, atol=1e-6)
    for bad in (0, e.dimension + 1, 2.5):
        with pytest.raises(BitnetOnnxError, match="dimensions"):
            e.encode(TEXTS, dimensions=bad)


def test_normalize_follows_manifest_unless_asked(embedders):
    g = embedders["gemma3"]  # exported with a Dense head and without Normalize
    assert not g.manifest.normalize and g.dimension != g.manifest.hidden_size
    raw = g.encode(TEXTS)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    unit = g.encode(TEXTS, normalize=True)
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(g.encode(TEXTS, dimensions=8), raw[:, :8])  # no renormalization asked


def test_similarity_is_cosine(embedders):
    g = embedders["gemma3"]  # unnormalized output: similarity must normalize
    x = g.encode(TEXTS)
    sim = g.similarity(x, x[:2])
    assert sim.shape == (len(TEXTS), 2) and sim.dtype == np.float32
    want = np.array([[u @ v / (np.linalg.norm(u) * np.linalg.norm(v)) for v in x[:2]] for u in x])
    np.testing.assert_allclose(sim, want, rtol=0, atol=1e-6)
    assert g.similarity(x[0], x[0]).shape == (1, 1)


def test_token_embeddings(embedders):
    e = embedders["gemma3"]
    tokens = e.encode(TEXTS, batch_size=3, output_value="token_embeddings")
    lengths = [len(x) for x in TextTokenizer.from_folder(e.folder).tokenize(TEXTS)]
    assert [t.shape for t in tokens] == [(n, e.manifest.hidden_size) for n in lengths]
    alone = e.encode(TEXTS[3], output_value="token_embeddings")
    np.testing.assert_allclose(tokens[3], alone, rtol=0, atol=2e-5)
    with pytest.raises(BitnetOnnxError, match="output_value"):
        e.encode(TEXTS, output_value="logits")


def test_threads(exports, embedders, monkeypatch):
    made = _recorded_sessions(monkeypatch)
    one = embedders["qwen3"]
    Embedder(exports["qwen3"], threads=1)
    two = Embedder(exports["qwen3"], threads=2)
    assert [s.get_session_options().intra_op_num_threads for s in made] == [1, 2]
    np.testing.assert_allclose(two.encode(TEXTS), one.encode(TEXTS), rtol=0, atol=2e-5)
    with pytest.raises(BitnetOnnxError, match="threads"):
        Embedder(exports["qwen3"], threads=0)


class _RecordingSession:
    """Wraps an ORT session and records the shape of every batch it runs."""

    def __init__(self, session):
        self.session, self.shapes = session, []

    def run(self, outputs, feeds, run_options=None):
        self.shapes.append(feeds["input_ids"].shape)
        return self.session.run(outputs, feeds, run_options)

    def __getattr__(self, name):  # everything else as the wrapped session
        return getattr(self.session, name)


def _recorded_sessions(monkeypatch) -> list[_RecordingSession]:
    """The sessions Embedders made from now on, each wrapped in a recorder (the session is private:
    it is watched where it is made, not swapped)."""
    import bitnet_onnx.runtime.embedder as module

    made, create = [], module.create_session

    def recording(*args, **kwargs):
        made.append(_RecordingSession(create(*args, **kwargs)))
        return made[-1]

    monkeypatch.setattr(module, "create_session", recording)
    return made


def test_length_sorted_batches_within_token_budget(exports, embedders, monkeypatch):
    made = _recorded_sessions(monkeypatch)
    e = Embedder(exports["qwen3"], threads=1)
    (recorder,) = made
    lengths = [len(x) for x in TextTokenizer.from_folder(e.folder).tokenize(TEXTS)]
    got = e.encode(TEXTS, batch_size=4, max_batch_tokens=2 * max(lengths))
    widths = [w for _, w in recorder.shapes]
    assert widths == sorted(widths, reverse=True) and widths[0] == max(lengths)  # longest first, dynamic padding
    assert all(b * w <= 2 * max(lengths) or b == 1 for b, w in recorder.shapes)
    assert sum(b for b, _ in recorder.shapes) == len(TEXTS) and max(b for b, _ in recorder.shapes) <= 4
    np.testing.assert_allclose(got, embedders["qwen3"].encode(TEXTS), rtol=0, atol=2e-5)


def test_bad_arguments(embedders):
    e = embedders["qwen3"]
    with pytest.raises(BitnetOnnxError, match=r"texts\[1\]"):
        e.encode(["fine", None])
    with pytest.raises(BitnetOnnxError, match=r"texts\[1\] holds a lone surrogate \(U\+D800\) at character 2"):
        e.encode(["fine", "ab\ud800"])  # JSON's "\ud800" gives such a str; it has no UTF-8 form
    with pytest.raises(BitnetOnnxError, match="batch_size"):
        e.encode(TEXTS, batch_size=0)
    with pytest.raises(BitnetOnnxError, match="max_batch_tokens"):
        e.encode(TEXTS, max_batch_tokens="many")


# --- broken folders -----------------------------------------------------------------------------------


def test_missing_folder(tmp_path):
    with pytest.raises(BitnetOnnxError, match="not a folder"):
        Embedder(tmp_path / "nowhere")


def test_missing_manifest(exports, private_copy):
    folder = private_copy(exports["qwen3"], "copy")
    (folder / "bitnet_onnx.json").unlink()
    with pytest.raises(BitnetOnnxError, match="manifest missing"):
        Embedder(folder)


def test_missing_and_corrupt_model(exports, private_copy):
    folder = private_copy(exports["qwen3"], "copy")
    data = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(data[: len(data) // 3])
    with pytest.raises(BitnetOnnxError, match="model.onnx: not a valid ONNX model"):
        Embedder(folder)
    (folder / "model.onnx").unlink()
    with pytest.raises(BitnetOnnxError, match="model.onnx: model file missing"):
        Embedder(folder)


def test_op_library_missing_or_not_loadable(exports, tmp_path, monkeypatch):
    monkeypatch.setenv("BITNET_ONNX_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(BitnetOnnxError, match="missing.so"):
        Embedder(exports["qwen3"])
    not_a_library = tmp_path / "fake.so"
    not_a_library.write_text("this is not a shared library\n")
    monkeypatch.setenv("BITNET_ONNX_LIBRARY", str(not_a_library))
    with pytest.raises(BitnetOnnxError, match="fake.so: op library could not be loaded"):
        Embedder(exports["qwen3"])


def test_custom_op_graph_without_library_says_so(exports, private_copy):
    folder = private_copy(exports["qwen3"], "copy")
    manifest = json.loads((folder / "bitnet_onnx.json").read_text())
    manifest["needs_custom_ops"] = False  # a wrong manifest: the graph does use I2STernaryMatMul
    (folder / "bitnet_onnx.json").write_text(json.dumps(manifest))
    with pytest.raises(BitnetOnnxError, match="operator this onnxruntime does not know.*needs_custom_ops"):
        Embedder(folder)


def test_prepare_then_embed_equals_encode(embedders):
    """prepare (the ids and token counts a caller needs, the prompt resolved once) + embed = encode."""
    for e in embedders.values():
        name = next(iter(e.prompts))
        prepared = e.prepare(TEXTS, prompt_name=name, dimensions=32, precision="binary")
        assert prepared.ids == e.tokenize(TEXTS, prompt_name=name)
        assert prepared.token_counts == [len(x) for x in prepared.ids] and prepared.tokens == sum(prepared.token_counts)
        assert prepared.prompt_length == e.prompt_length(e.resolve_prompt(name))
        got = e.embed(prepared, batch_size=3)
        np.testing.assert_array_equal(got, e.encode(TEXTS, prompt_name=name, dimensions=32, precision="binary"))
        floats = e.embed(e.prepare(TEXTS, normalize=True, dimensions=16), batch_size=3)
        np.testing.assert_allclose(floats, e.encode(TEXTS, normalize=True, dimensions=16), rtol=0, atol=1e-6)
        ids = e.prepare(ids=prepared.ids)  # token ids as they are: no prompt added
        assert ids.ids == prepared.ids and ids.prompt_length == 0
        input_ids, mask = prepared.padded()
        assert mask.sum(1).tolist() == prepared.token_counts and input_ids.shape == mask.shape


def test_prepare_refuses_bad_requests_before_running(embedders):
    e = embedders["gemma3"]
    with pytest.raises(BitnetOnnxError, match="texts or ids"):
        e.prepare()
    with pytest.raises(BitnetOnnxError, match="texts or ids"):
        e.prepare(TEXTS, ids=[[1, 2]])
    with pytest.raises(BitnetOnnxError, match="token ids take no prompt"):
        e.prepare(ids=[[1, 2]], prompt_name="query")
    with pytest.raises(BitnetOnnxError, match="dimensions must be an integer"):
        e.prepare(TEXTS, dimensions=0)
    with pytest.raises(BitnetOnnxError, match="precision"):
        e.prepare(TEXTS, precision="float8")
    with pytest.raises(BitnetOnnxError, match=r"texts\[1\] is int"):
        e.prepare(["fine", 3])


def test_a_run_is_stopped_by_its_run_options(embedders):
    """Stopping is an option of the call (RunOptions.terminate), not a session swapped in: a stopped call
    fails, the next one with fresh options runs."""
    import onnxruntime as ort

    e = embedders["qwen3"]
    prepared = e.prepare(TEXTS)
    stop = ort.RunOptions()
    stop.terminate = True
    with pytest.raises(Exception, match="terminate"):
        e.embed(prepared, run_options=stop)
    with pytest.raises(Exception, match="terminate"):
        e.run_batch(prepared.ids, run_options=stop)
    np.testing.assert_array_equal(e.embed(prepared, run_options=ort.RunOptions()), e.embed(prepared))
