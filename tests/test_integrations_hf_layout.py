"""The HF layout (bitnet_onnx.export.hf_layout) as sentence-transformers' ONNX backend and optimum
read it, without optimum itself (optimum-onnx pins transformers < 4.58, docs/integrations.md):
transformers' AutoConfig and AutoTokenizer on the folder, ``onnx/model.onnx`` fed exactly the inputs
optimum's ORTModelForFeatureExtraction feeds (the session's input names) and read by its output
name, then sentence-transformers' own Pooling / Dense / Normalize modules loaded from the layout's
folders. The vectors equal ``Embedder.encode``'s for both architectures and every weight variant,
the i2s graph with our library registered, int8 and nbits with no custom library; at the real size (the
real Gemma3-270M GGUF's export) optimum's own plain calls load it too, in its venv. With weights in
external data (the threshold at 0 on a tiny model), the layout, at export or after the fact, also
after a cut-short run, leaves one data file that every graph names, and refuses a missing or foreign
one in a line naming it."""

from __future__ import annotations

import filecmp
import json
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from integrations_support import ARCHS, REAL_SIZE_TEXTS, TEXTS, LayoutExports, assert_same_vectors, external_locations
from optimum_support import check_loaders, run_loaders

pytest.importorskip("sentence_transformers")
import torch  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Pooling  # noqa: E402
from sentence_transformers.base.modules import Dense, Normalize  # noqa: E402
from transformers import AutoConfig, AutoTokenizer  # noqa: E402

from bitnet_onnx import Embedder, customops  # noqa: E402
from bitnet_onnx.errors import BitnetOnnxError  # noqa: E402
from bitnet_onnx.export.hf_layout import (  # noqa: E402
    HF_EXTERNAL_DATA_NAME, HF_MODEL_FILE, LAST_HIDDEN_STATE, token_model, write_hf_layout,
)
from bitnet_onnx.manifest import (  # noqa: E402
    EXTERNAL_DATA_NAME, HF_EXTERNAL_DATA_FILE, MODEL_NAME, TEXT_MODEL_NAME, Manifest,
)

WEIGHTS = ("i2s", "int8", "nbits")
ST_MODULES = {"Pooling": Pooling, "Dense": Dense, "Normalize": Normalize}


@pytest.fixture(scope="module")
def layout_export(tiny_model, tmp_path_factory):
    return LayoutExports(tiny_model, tmp_path_factory.mktemp("hf-layout"))


def session_options(folder):
    """What a user hands sentence-transformers / optimum: ours for a graph with our ops, else ORT's plain ones."""
    return customops.session_options() if Manifest.read(folder).needs_custom_ops else ort.SessionOptions()


def embed_as_sentence_transformers_onnx(folder, texts, prompt=""):
    """sentence-transformers' ONNX backend minus optimum's glue: AutoTokenizer, the session of
    onnx/model.onnx fed by input name, then the modules.json modules after the Transformer."""
    tok = AutoTokenizer.from_pretrained(folder)
    max_length = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
    enc = tok([prompt + t for t in texts], padding=True, truncation=True, max_length=max_length, return_tensors="np")
    session = ort.InferenceSession(str(folder / HF_MODEL_FILE), session_options(folder))
    feed = {i.name: enc[i.name].astype(np.int64) for i in session.get_inputs()}  # optimum: by input name
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    features = {"token_embeddings": torch.from_numpy(outputs[LAST_HIDDEN_STATE]),
                "attention_mask": torch.from_numpy(enc["attention_mask"])}
    modules = json.loads((folder / "modules.json").read_text())
    assert modules[0]["type"] == "sentence_transformers.models.Transformer"
    with torch.inference_mode():
        for module in modules[1:]:
            kind = module["type"].rsplit(".", 1)[-1]
            features = ST_MODULES[kind].load(str(folder), subfolder=module["path"])(features)
    return features["sentence_embedding"].numpy()


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_layout_gives_the_embedders_vectors(layout_export, arch, weights):
    folder = layout_export(arch, weights)
    embedder = Embedder(folder, threads=1)
    assert_same_vectors(embed_as_sentence_transformers_onnx(folder, TEXTS), embedder.encode(TEXTS, prompt=""))
    query = embedder.prompts["query"]
    assert_same_vectors(embed_as_sentence_transformers_onnx(folder, TEXTS, prompt=query),
                        embedder.encode(TEXTS, prompt_name="query"))


@pytest.mark.parametrize("arch", ARCHS)
def test_dense_head_comes_along(layout_export, arch):
    folder = layout_export(arch, "int8", dense=True)
    kinds = [m["type"].rsplit(".", 1)[-1] for m in json.loads((folder / "modules.json").read_text())]
    assert kinds == ["Transformer", "Pooling", "Dense", "Dense", "Normalize"]
    embedder = Embedder(folder, threads=1)
    assert embedder.dimension != embedder.manifest.hidden_size
    assert_same_vectors(embed_as_sentence_transformers_onnx(folder, TEXTS), embedder.encode(TEXTS, prompt=""))


@pytest.mark.parametrize("arch", ARCHS)
def test_transformers_tokenizer_gives_our_ids_with_qwen3s_eos(layout_export, arch):
    folder = layout_export(arch, "int8")
    embedder = Embedder(folder, threads=1)
    tok = AutoTokenizer.from_pretrained(folder)
    ours = embedder.tokenize(TEXTS, prompt="")
    theirs = tok(TEXTS, truncation=True, max_length=embedder.manifest.max_length)["input_ids"]
    assert theirs == ours
    eos = embedder.manifest.append_eos_token_id
    assert (eos is not None) == (arch == "qwen3")
    if eos is not None:
        assert all(ids[-1] == eos for ids in theirs)


@pytest.mark.parametrize("arch", ARCHS)
def test_layout_files(layout_export, arch):
    folder = layout_export(arch, "i2s")
    manifest = Manifest.read(folder)
    st_config = json.loads((folder / "config_sentence_transformers.json").read_text())
    assert st_config["prompts"] == manifest.prompts
    assert st_config["default_prompt_name"] == manifest.default_prompt_name
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    assert pooling["word_embedding_dimension"] == manifest.hidden_size
    assert [k for k, v in pooling.items() if k.startswith("pooling_mode") and v] == \
        [{"mean": "pooling_mode_mean_tokens", "lasttoken": "pooling_mode_lasttoken", "cls": "pooling_mode_cls_token"}[manifest.pooling]]
    model = onnx.load(str(folder / HF_MODEL_FILE))
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in model.graph.output] == [LAST_HIDDEN_STATE]
    assert any(n.domain == customops.DOMAIN for n in model.graph.node)  # i2s: our op, as in model.onnx
    assert AutoConfig.from_pretrained(folder).model_type == json.loads((folder / "config.json").read_text())["model_type"]


def test_ort_native_graphs_load_without_our_library(layout_export):
    for arch in ARCHS:
        for weights in ("int8", "nbits"):
            folder = layout_export(arch, weights)
            assert not Manifest.read(folder).needs_custom_ops
            ort.InferenceSession(str(folder / HF_MODEL_FILE), ort.SessionOptions())


def test_i2s_graph_needs_our_library(layout_export):
    folder = layout_export("qwen3", "i2s")
    with pytest.raises(Exception, match="I2STernaryMatMul|EncoderAttention"):
        ort.InferenceSession(str(folder / HF_MODEL_FILE), ort.SessionOptions())


def test_include_prompt_false_drops_prompt_length(tiny_model, tmp_path):
    import shutil

    from integrations_support import export_with_layout

    model = tmp_path / "model"
    shutil.copytree(tiny_model("gemma3"), model)
    pooling_file = model / "1_Pooling" / "config.json"
    pooling_file.write_text(json.dumps({**json.loads(pooling_file.read_text()), "include_prompt": False}))
    folder = export_with_layout(tmp_path, model, "int8")
    assert "prompt_length" in [i.name for i in onnx.load(str(folder / "model.onnx")).graph.input]
    assert [i.name for i in onnx.load(str(folder / HF_MODEL_FILE)).graph.input] == ["input_ids", "attention_mask"]
    assert json.loads((folder / "1_Pooling" / "config.json").read_text())["include_prompt"] is False


def test_token_model_refuses_a_graph_without_last_hidden_state():
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["input_ids"], ["token_embeddings"])], "g",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
                              [helper.make_tensor_value_info("token_embeddings", TensorProto.INT64, ["b", "s"])])
    with pytest.raises(BitnetOnnxError, match="no 'last_hidden_state' output; export the model again"):
        token_model(helper.make_model(graph))


@pytest.mark.parametrize("arch", ARCHS)
def test_both_model_onnx_files_give_one_last_hidden_state(layout_export, arch):
    """optimum takes either model.onnx of the folder (it warns that there are two): the top-level graph
    outputs last_hidden_state beside its own outputs, the same tensor as token_embeddings and as
    onnx/model.onnx's only output."""
    folder = layout_export(arch, "i2s")
    top = ort.InferenceSession(str(folder / "model.onnx"), customops.session_options())
    token = ort.InferenceSession(str(folder / HF_MODEL_FILE), customops.session_options())
    assert [o.name for o in top.get_outputs()] == ["sentence_embedding", "token_embeddings", LAST_HIDDEN_STATE]
    assert [o.name for o in token.get_outputs()] == [LAST_HIDDEN_STATE]
    ids = np.array([[2, 300, 301, 1], [2, 17, 0, 0]], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}
    want, last = top.run(["token_embeddings", LAST_HIDDEN_STATE], feed)
    (got,) = token.run([LAST_HIDDEN_STATE], feed)
    assert want.shape == (2, 4, Manifest.read(folder).hidden_size)
    np.testing.assert_array_equal(last, want)
    np.testing.assert_array_equal(got, want)


def test_write_hf_layout_names_a_folder_that_is_not_an_export(tmp_path, tiny_model):
    with pytest.raises(BitnetOnnxError, match="manifest missing"):
        write_hf_layout(tmp_path, tiny_model("qwen3"))


@pytest.mark.parametrize("arch", ARCHS)
def test_the_layout_leaves_the_embedders_vectors_as_they_were(tiny_model, tiny_export, layout_export, arch):
    plain = Embedder(tiny_export(tiny_model(arch), weights="int8"), threads=1)
    with_layout = Embedder(layout_export(arch, "int8"), threads=1)
    for prompt_name in [None, *plain.prompts]:
        assert with_layout.tokenize(TEXTS, prompt_name=prompt_name) == plain.tokenize(TEXTS, prompt_name=prompt_name)
        np.testing.assert_array_equal(with_layout.encode(TEXTS, prompt_name=prompt_name),
                                      plain.encode(TEXTS, prompt_name=prompt_name))


def test_large_weights_go_to_onnx_data(layout_export, monkeypatch, tmp_path):
    import bitnet_onnx.export.hf_layout as hf_layout

    folder = layout_export("gemma3", "i2s")
    monkeypatch.setattr(hf_layout, "EXTERNAL_DATA_THRESHOLD", 0)
    path = hf_layout.save_token_model(token_model(onnx.load(str(folder / "model.onnx"))), tmp_path, True)
    assert (tmp_path / "onnx" / hf_layout.HF_EXTERNAL_DATA_NAME).stat().st_size > 0
    stored = onnx.load(str(path), load_external_data=False).graph.initializer
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in stored)
    ids = np.array([[2, 300, 301, 1]], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    (split,) = ort.InferenceSession(str(path), customops.session_options()).run(None, feed)
    (inline,) = ort.InferenceSession(str(folder / HF_MODEL_FILE), customops.session_options()).run(None, feed)
    np.testing.assert_array_equal(split, inline)


def test_gguf_source_layout_loads_in_transformers(tiny_model, tmp_path):
    """A GGUF source's layout like a folder's: config.json as transformers types it (query_pre_attn_scalar
    an int, which transformers 5 refuses as 96.0) and the same vectors as Embedder."""
    from bitnet_onnx.convert_gguf.writer import convert
    from bitnet_onnx.export.exporter import export

    gguf_file = convert(tiny_model("gemma3"), tmp_path / "m.gguf", "f16", progress=False)
    folder = export(gguf_file, tmp_path / "out", weights="int8", layout="hf")
    config = json.loads((folder / "config.json").read_text())
    assert type(config["query_pre_attn_scalar"]) is int and config["query_pre_attn_scalar"] == 96
    assert AutoConfig.from_pretrained(folder).query_pre_attn_scalar == 96
    assert_same_vectors(embed_as_sentence_transformers_onnx(folder, TEXTS), Embedder(folder, threads=1).encode(TEXTS, prompt=""))


@pytest.mark.real_size
@pytest.mark.venv
def test_real_gemma3_270m_gguf_layout_loads_with_the_plain_calls(gemma3_270m, gemma3_270m_export, private_copy,
                                                                 optimum_venv, tmp_path):
    """The same at the real size: the Q4_K_M Gemma3-270M GGUF (262,144-token vocabulary, external data)
    ternarized to i2s, the layout added (write_hf_layout, what --layout hf writes: test_integrations_cli.py)
    to a copy of the suite's shared export. transformers 5 reads its config and tokenizer, and the layout's
    token model with the modules after it gives Embedder's vectors; so do sentence-transformers' and
    optimum's plain calls in optimum's venv (tests/optimum_support.py), our library in their session options."""
    folder = write_hf_layout(private_copy(gemma3_270m_export("ternarized-i2s")), gemma3_270m)
    config = AutoConfig.from_pretrained(folder)
    assert (config.query_pre_attn_scalar, config.vocab_size, config.hidden_size) == (256, 262144, 640)
    assert (folder / HF_EXTERNAL_DATA_FILE).stat().st_size > 100 << 20
    assert_same_vectors(embed_as_sentence_transformers_onnx(folder, TEXTS), Embedder(folder, threads=1).encode(TEXTS, prompt=""))
    root = tmp_path / "optimum"
    root.mkdir()
    ((_, got, files),) = run_loaders(optimum_venv, root, {"gemma3-270m": folder}, REAL_SIZE_TEXTS).values()
    assert Manifest.read(folder).needs_custom_ops  # i2s: our library in the loaders' session options
    check_loaders(folder, got, files, query_prompt=False, texts=REAL_SIZE_TEXTS)  # a GGUF names no prompts


# -- the weights on disk once: the export's data file moved into onnx/, named by every graph -----------


@pytest.fixture
def external_export(tiny_model, tmp_path, monkeypatch):
    """external_export(name, **export options) -> a tiny Qwen3 int8 export with its weights in
    model.onnx.data (the threshold at 0, as at the real sizes) and the strings-in graph, which names
    that file too."""
    import bitnet_onnx.export.writer as writer
    from bitnet_onnx.export.exporter import export

    monkeypatch.setattr(writer, "EXTERNAL_DATA_THRESHOLD", 0)
    return lambda name, **options: export(tiny_model("qwen3"), tmp_path / name, weights="int8", text_input=True,
                                          **options)


def assert_weights_once(folder) -> None:
    """One data file, onnx/model.onnx_data, that the top-level graphs and the layout's read."""
    assert not (folder / EXTERNAL_DATA_NAME).exists()
    for graph in (MODEL_NAME, TEXT_MODEL_NAME):
        assert external_locations(folder / graph) == {HF_EXTERNAL_DATA_FILE}, graph
    assert external_locations(folder / HF_MODEL_FILE) == {HF_EXTERNAL_DATA_NAME}
    ids = np.array([[2, 300, 301, 1]], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    top = ort.InferenceSession(str(folder / MODEL_NAME), session_options(folder))
    token = ort.InferenceSession(str(folder / HF_MODEL_FILE), session_options(folder))
    np.testing.assert_array_equal(token.run([LAST_HIDDEN_STATE], feed)[0], top.run(["token_embeddings"], feed)[0])


def test_layout_after_the_fact_moves_the_weights_as_the_export_does(tiny_model, external_export):
    folder = external_export("plain")
    before = Embedder(folder, threads=1).encode(TEXTS)
    write_hf_layout(folder, tiny_model("qwen3"))
    assert_weights_once(folder)
    np.testing.assert_array_equal(Embedder(folder, threads=1).encode(TEXTS), before)  # the strings-in graph
    at_export = external_export("hf", layout="hf")
    assert_weights_once(at_export)
    assert sorted(p.relative_to(at_export) for p in at_export.rglob("*")) == \
        sorted(p.relative_to(folder) for p in folder.rglob("*"))
    assert filecmp.cmp(at_export / HF_EXTERNAL_DATA_FILE, folder / HF_EXTERNAL_DATA_FILE, shallow=False)


@pytest.mark.parametrize("left_by", ["a move cut short", "the layout that copied the weights"])
def test_layout_again_leaves_the_weights_once(tiny_model, external_export, left_by):
    """write_hf_layout on a folder where the data file already moved but the graphs still name
    model.onnx.data (a run stopped between its renames), or where an earlier bitnet-onnx put a copy
    of it in onnx/: one data file after it, the same vectors."""
    folder = external_export("plain")
    before = Embedder(folder, threads=1).encode(TEXTS)
    (folder / "onnx").mkdir()
    move = os.replace if left_by == "a move cut short" else shutil.copyfile
    move(folder / EXTERNAL_DATA_NAME, folder / HF_EXTERNAL_DATA_FILE)
    write_hf_layout(folder, tiny_model("qwen3"))
    assert_weights_once(folder)
    np.testing.assert_array_equal(Embedder(folder, threads=1).encode(TEXTS), before)


def test_layout_names_a_missing_or_foreign_data_file(tiny_model, external_export):
    folder = external_export("missing")
    (folder / EXTERNAL_DATA_NAME).unlink()
    with pytest.raises(BitnetOnnxError, match=rf"{HF_EXTERNAL_DATA_FILE}: file not found \(the external data of "
                                              rf"model\.onnx\), nor is model\.onnx\.data there$"):
        write_hf_layout(folder, tiny_model("qwen3"))
    folder = external_export("foreign")
    model = onnx.load(str(folder / MODEL_NAME), load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "weights.bin"
    onnx.save_model(model, str(folder / MODEL_NAME))
    with pytest.raises(BitnetOnnxError, match=r"model\.onnx: keeps its weights in weights\.bin, not in one of the "
                                              r"files an export writes \(model\.onnx\.data or onnx/model\.onnx_data\)$"):
        write_hf_layout(folder, tiny_model("qwen3"))


def test_embedder_names_a_fifo_in_place_of_the_moved_weights(tiny_model, external_export):
    """The runtime checks the layout's data file before onnxruntime opens it: a FIFO there would block the load."""
    folder = external_export("fifo", layout="hf")
    (folder / HF_EXTERNAL_DATA_FILE).unlink()
    os.mkfifo(folder / HF_EXTERNAL_DATA_FILE)
    with pytest.raises(BitnetOnnxError, match=rf"{HF_EXTERNAL_DATA_FILE}.*is a FIFO"):
        Embedder(folder, threads=1)
