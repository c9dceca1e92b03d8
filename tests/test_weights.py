"""The weights loader, the sentence-transformers reader and the test-model factory."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

from bitnet_onnx.arch import ARCHITECTURES, FULL, LINEAR, NORM, NORM_IN, REAL_SHAPES, SLIDING
from bitnet_onnx import safetensors_file
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.st_modules import read_module_stack, read_st_modules
from bitnet_onnx.testing import factory, make_model
from bitnet_onnx.weights import open_model

ARCHS = tuple(ARCHITECTURES)


def file_digests(folder: Path) -> dict[str, str]:
    """relative path -> sha256 of every file of a folder, read in blocks (real-size weights are GBs)."""
    digests = {}
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with f.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        digests[str(f.relative_to(folder))] = digest.hexdigest()
    return digests


@pytest.mark.parametrize("arch", ARCHS)
def test_factory_folder_loads_in_transformers(tiny_model, arch):
    torch = pytest.importorskip("torch")
    import transformers

    path = tiny_model(arch, dtype="bfloat16", dense=True)
    folder = open_model(path)
    model, info = getattr(transformers, folder.arch.hf_class).from_pretrained(path, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    # Only the BitNet per-projection norms are unknown to transformers.
    expected_unexpected = {hf for spec, _, _, hf in folder.tensors() if spec.kind == NORM_IN}
    assert set(info["unexpected_keys"]) == expected_unexpected
    state = model.state_dict()
    for spec, layer, _, hf in folder.tensors():
        if spec.kind != NORM_IN:
            assert torch.equal(state[hf].float(), torch.from_numpy(folder.tensor(spec.role, layer))), hf
    # The tokenizer loads in transformers and agrees with the tokenizers library.
    from tokenizers import Tokenizer

    text = "Hello world, the quick fox 🙂 jumps"
    auto = transformers.AutoTokenizer.from_pretrained(path)
    assert auto(text)["input_ids"] == Tokenizer.from_file(str(path / "tokenizer.json")).encode(text).ids


@pytest.mark.parametrize("arch", ARCHS)
def test_factory_shapes_and_config(tiny_model, arch):
    folder = open_model(tiny_model(arch, dtype="bfloat16"))
    cfg = folder.cfg
    assert folder.is_bitnet and folder.arch.name == arch
    if arch == "qwen3":
        assert (cfg.hidden, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn, cfg.n_layers) == (128, 4, 2, 64, 256, 2)
        assert cfg.layer_types == (FULL, FULL) and cfg.rope_theta == 1e6
    else:
        assert (cfg.hidden, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn, cfg.n_layers) == (128, 2, 1, 128, 256, 3)
        assert cfg.layer_types == (SLIDING, SLIDING, FULL) and cfg.sliding_window == 8
        assert (cfg.rope_theta, cfg.rope_local_theta) == (1e6, 1e4)
        assert cfg.query_scale == pytest.approx(96 ** -0.5)
    names = [hf for _, _, _, hf in folder.tensors()]
    assert len(names) == len(set(names)) == len(folder.raw_tensor_names())
    for spec, layer, gguf_name, hf in folder.tensors():
        t = folder.tensor(spec.role, layer)
        assert t.dtype == np.float32 and t.shape == cfg.shape(spec)
        assert "{" not in gguf_name and "{" not in hf
        if spec.kind == LINEAR:
            assert spec.shape[-1] and t.shape[1] % 128 == 0  # every projection's K
            assert 0.01 < np.mean(np.abs(t)) < 0.03
        if spec.kind == NORM:  # own norms: w near 1, or near 0 where stored as w of (1 + w)
            assert abs(np.mean(t) - (1 - folder.arch.norm_offset)) < 0.1
        if spec.kind == NORM_IN:
            assert abs(np.mean(t) - 1) < 0.1


@pytest.mark.parametrize("arch", ARCHS)
def test_v4_and_v5_configs_give_the_same_model_config(tiny_model, arch):
    v5 = open_model(tiny_model(arch, dtype="bfloat16", config_style="v5"))
    v4 = open_model(tiny_model(arch, dtype="bfloat16", config_style="v4"))
    assert "rope_parameters" in v5.config and "rope_parameters" not in v4.config
    assert v5.cfg == v4.cfg
    assert (v5.path / "model.safetensors").read_bytes() == (v4.path / "model.safetensors").read_bytes()


def test_factory_is_deterministic_and_seeded(tmp_path, tiny_model):
    a = file_digests(tiny_model("gemma3", dtype="bfloat16", dense=True))  # the session's folder, built by the same call
    b = file_digests(make_model(tmp_path / "b", "gemma3", dense=True))
    c = file_digests(make_model(tmp_path / "c", "gemma3", dense=True, seed=4))
    assert a == b
    assert a["model.safetensors"] != c["model.safetensors"] and a["tokenizer.json"] == c["tokenizer.json"]


def test_factory_options(tmp_path):
    folder = open_model(make_model(tmp_path / "m", "gemma3", bitnet=False, layers=6, sliding_window=16,
                                   bidirectional=True, dtype="float32", pooling="cls", normalize=False,
                                   prompts={"q": "query: "}, padding_side="right"))
    assert not folder.is_bitnet and folder.cfg.n_layers == 6 and folder.cfg.sliding_window == 16
    assert folder.cfg.layer_types == (SLIDING, SLIDING, FULL) * 2 and not folder.cfg.causal
    assert not any(spec.kind == NORM_IN for spec, *_ in folder.tensors())
    st = folder.st_modules()
    assert (st.pooling, st.normalize, st.dense, st.prompts, st.dimension) == ("cls", False, [], {"q": "query: "}, 128)
    assert json.loads((folder.path / "tokenizer_config.json").read_text())["padding_side"] == "right"
    with pytest.raises(ValueError, match="not empty"):
        make_model(folder.path, "gemma3")


def test_real_shape_configs():
    for arch, real in REAL_SHAPES.items():
        cfg = factory.model_config(arch, factory.SHAPES[arch][real.name])
        if arch == "qwen3":
            assert (cfg.hidden, cfg.dims["q_dim"], cfg.vocab, cfg.n_layers) == (1024, 2048, 151936, 28)
        elif arch == "gemma3":
            assert cfg.layer_types == ((SLIDING,) * 5 + (FULL,)) * 3 and cfg.sliding_window == 512
            assert cfg.dims["q_dim"] == 1024 and cfg.query_scale == pytest.approx(256 ** -0.5)


def test_sharded_folder_and_model_prefix(tmp_path, monkeypatch):
    monkeypatch.setattr(factory, "_SHARD_BYTES", 100_000)
    path = make_model(tmp_path / "m", "qwen3", dtype="float32")
    index = json.loads((path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2 and not (path / "model.safetensors").exists()
    sharded = open_model(path)
    assert sharded.is_bitnet
    # Re-save as one file with the "model." prefix transformers uses for full checkpoints.
    flat = {}
    for shard in sorted(set(index["weight_map"].values())):
        flat.update({"model." + k: v for k, v in safetensors.numpy.load_file(path / shard).items()})
    other = tmp_path / "prefixed"
    other.mkdir()
    (other / "config.json").write_bytes((path / "config.json").read_bytes())
    safetensors.numpy.save_file(flat, other / "model.safetensors")
    prefixed = open_model(other, arch="qwen3")
    for spec, layer, _, hf in sharded.tensors():
        assert prefixed.hf_name(spec.role, layer) == "model." + hf
        assert np.array_equal(prefixed.tensor(spec.role, layer), sharded.tensor(spec.role, layer))


def test_bf16_is_widened_exactly(tiny_model):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    path = tiny_model("qwen3", dtype="bfloat16")
    folder = open_model(path)
    ref = load_file(path / "model.safetensors")
    assert ref["layers.1.mlp.down_proj.weight"].dtype == torch.bfloat16
    for spec, layer, _, hf in folder.tensors():
        assert np.array_equal(folder.tensor(spec.role, layer), ref[hf].float().numpy())


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_tensor_f16_equals_the_float32_tensor_cast(tiny_model, private_copy, monkeypatch, dtype):
    """tensor_f16, converted chunk by chunk (chunks of 1000 values here: none divides a tensor of the tiny
    model evenly), gives the float32 tensor's float16 cast, element for element, for every stored dtype."""
    monkeypatch.setattr(safetensors_file.entry_chunks, "__defaults__", (1000,))
    path = tiny_model("gemma3", dtype="bfloat16" if dtype == "bfloat16" else "float32")
    if dtype == "float16":  # the factory writes bf16 or f32: a copy stored as f16
        path = private_copy(path, "f16")
        _rewrite(path, lambda t: t.update({name: v.astype(np.float16) for name, v in t.items()}))
    folder = open_model(path)
    for spec, layer, _, _ in folder.tensors():
        got, want = folder.tensor_f16(spec.role, layer), folder.tensor(spec.role, layer).astype(np.float16)
        assert got.dtype == np.float16 and got.shape == want.shape
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), (spec.role, layer)


# ---- bad inputs: one BitnetOnnxError naming the file and the tensor


def _rewrite(path: Path, edit) -> None:
    tensors = safetensors.numpy.load_file(path / "model.safetensors")
    edit(tensors)
    safetensors.numpy.save_file(tensors, path / "model.safetensors")


@pytest.fixture
def f32_model(qwen3_bitnet, private_copy):
    return private_copy(qwen3_bitnet, "m")


def test_missing_tensor(f32_model):
    _rewrite(f32_model, lambda t: t.pop("layers.1.mlp.up_proj.weight"))
    folder = open_model(f32_model)
    with pytest.raises(BitnetOnnxError, match=r"model.safetensors: required tensor layers.1.mlp.up_proj.weight is missing"):
        folder.tensor("ffn_up", 1)


def test_misshaped_tensor(f32_model):
    def edit(t):
        t["layers.1.self_attn.q_proj.weight"] = np.zeros((64, 128), np.float32)

    _rewrite(f32_model, edit)
    with pytest.raises(BitnetOnnxError) as e:
        open_model(f32_model).tensor("attn_q", 1)
    assert str(e.value) == ("model.safetensors: tensor layers.1.self_attn.q_proj.weight has shape (64, 128), "
                            "config.json implies (256, 128)")


def test_non_finite_tensor(f32_model):
    def edit(t):
        t["layers.0.self_attn.k_proj.weight"][3, 5] = np.nan

    _rewrite(f32_model, edit)
    with pytest.raises(BitnetOnnxError, match=r"model.safetensors: tensor layers.0.self_attn.k_proj.weight has non-finite"):
        open_model(f32_model).tensor("attn_k", 0)


@pytest.mark.parametrize("value, message", [
    (np.inf, r"model.safetensors: tensor embed_tokens.weight has non-finite values"),
    (-7e4, r"tensor embed_tokens.weight: value 70000 is beyond float16's range"),
])
def test_tensor_f16_refuses_what_float16_cannot_hold_in_any_chunk(f32_model, monkeypatch, value, message):
    monkeypatch.setattr(safetensors_file.entry_chunks, "__defaults__", (1000,))

    def edit(t):
        t["embed_tokens.weight"][-1, -1] = value  # in the last chunk

    _rewrite(f32_model, edit)
    with pytest.raises(BitnetOnnxError, match=message):
        open_model(f32_model).tensor_f16("token_embd")


def test_incomplete_bitnet_norms(f32_model):
    _rewrite(f32_model, lambda t: t.pop("layers.1.self_attn.o_proj.norm.weight"))
    with pytest.raises(BitnetOnnxError, match=r"incomplete: tensor layers.1.self_attn.o_proj.norm.weight is missing"):
        open_model(f32_model)


def test_truncated_safetensors(f32_model):
    file = f32_model / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-1000])
    with pytest.raises(BitnetOnnxError, match=r"model.safetensors: not a valid safetensors file"):
        open_model(f32_model)
    file.write_bytes(b"\x05\x00")
    with pytest.raises(BitnetOnnxError, match=r"model.safetensors: not a valid safetensors file"):
        open_model(f32_model)


def test_bad_folders(tmp_path, f32_model):
    with pytest.raises(BitnetOnnxError, match="no such directory"):
        open_model(tmp_path / "nope")
    with pytest.raises(BitnetOnnxError, match="config.json"):
        open_model(tmp_path)
    config = json.loads((f32_model / "config.json").read_text())
    with pytest.raises(BitnetOnnxError, match="does not match"):
        open_model(f32_model, arch="gemma3")
    (f32_model / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(BitnetOnnxError, match="unsupported model_type 'llama'; supported: qwen3"):
        open_model(f32_model)
    (f32_model / "config.json").write_text(json.dumps(config))
    (f32_model / "model.safetensors").unlink()
    with pytest.raises(BitnetOnnxError, match="no model.safetensors"):
        open_model(f32_model)


# ---- sentence-transformers modules


def _st_modules(path, arch: str):
    """The folder's modules read as ``arch`` would read them (its config.json may name another)."""
    return read_st_modules(path, ARCHITECTURES[arch], open_model(path).cfg.hidden)


def test_st_modules_dense_and_defaults(tiny_model, private_copy, caplog):
    path = private_copy(tiny_model("gemma3", dtype="bfloat16", dense=True), "m")
    st = _st_modules(path, "gemma3")
    assert st.pooling == "mean" and st.normalize and st.pooling_from_config
    assert [(d.weight.shape, d.bias is not None, d.activation) for d in st.dense] == [
        ((256, 128), False, "identity"), ((96, 256), True, "identity")]
    assert st.dimension == 96 and st.max_seq_length == 256 and st.default_prompt_name is None
    assert st.prompts["query"] == "task: search result | query: "
    dense = safetensors.numpy.load_file(path / "3_Dense" / "model.safetensors")
    assert np.array_equal(st.dense[1].bias, dense["linear.bias"])

    # No Pooling module: Qwen3 falls back to last-token with a warning; Gemma3 has no default.
    modules = json.loads((path / "modules.json").read_text())
    (path / "modules.json").write_text(json.dumps([m for m in modules if not m["type"].endswith("Pooling")]))
    with pytest.raises(BitnetOnnxError, match="no sentence-transformers Pooling module"):
        _st_modules(path, "gemma3")
    st = _st_modules(path, "qwen3")
    assert st.pooling == "lasttoken" and not st.pooling_from_config
    assert "default pooling 'lasttoken'" in caplog.text


def test_st_modules_bad_inputs(tiny_model, private_copy):
    path = private_copy(tiny_model("qwen3", dtype="bfloat16", dense=True), "m")
    pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
    (path / "1_Pooling" / "config.json").write_text(json.dumps({**pooling, "pooling_mode_max_tokens": True,
                                                                 "pooling_mode_lasttoken": False}))
    with pytest.raises(BitnetOnnxError, match="pooling_mode_max_tokens is not supported"):
        _st_modules(path, "qwen3")
    (path / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (path / "2_Dense" / "model.safetensors").rename(path / "2_Dense" / "pytorch_model.bin")
    with pytest.raises(BitnetOnnxError, match="2_Dense: Dense weights must be model.safetensors"):
        _st_modules(path, "qwen3")


def _rewrite_modules(path, edit):
    modules = json.loads((path / "modules.json").read_text())
    (path / "modules.json").write_text(json.dumps(edit(modules)))
    return modules


def test_st_modules_are_read_in_order_as_one_stack(tiny_model, private_copy):
    path = private_copy(tiny_model("qwen3", dtype="bfloat16", dense=True), "m")
    stack = read_module_stack(path)
    assert [(m.kind, m.path) for m in stack] == [("Transformer", ""), ("Pooling", "1_Pooling"), ("Dense", "2_Dense"),
                                                  ("Dense", "3_Dense"), ("Normalize", "4_Normalize")]
    # modules.json's list order is sentence-transformers' order; the idx keys do not reorder it
    _rewrite_modules(path, lambda ms: [{**m, "idx": len(ms) - i} for i, m in enumerate(ms)])
    assert read_module_stack(path) == stack


@pytest.mark.parametrize("module_type", ["sentence_transformers.models.LayerNorm", "my_package.Dense"])
def test_st_modules_refuse_a_module_the_graph_cannot_build(tiny_model, private_copy, module_type):
    """An unknown type (or a class of another package that borrows a known name) was silently dropped."""
    path = private_copy(tiny_model("qwen3", dtype="bfloat16", dense=True), "m")
    _rewrite_modules(path, lambda ms: [*ms[:2], {"idx": 2, "name": "x", "path": "2_Extra", "type": module_type}, *ms[2:]])
    with pytest.raises(BitnetOnnxError) as error:
        _st_modules(path, "qwen3")
    message = str(error.value)
    assert "\n" not in message and str(path / "modules.json") in message
    assert f"module 2 ({module_type!r}, path '2_Extra') is not a module the exported graph can build" in message


@pytest.mark.parametrize("order, culprit", [
    (["Transformer", "Pooling", "Normalize", "Dense", "Dense"], "module 3 ('sentence_transformers.models.Dense', "
                                                                 "path '2_Dense') follows a Normalize module"),
    (["Transformer", "Dense", "Pooling", "Dense", "Normalize"], "module 2 ('sentence_transformers.models.Pooling', "
                                                                 "path '1_Pooling') follows a Dense module"),
    (["Pooling", "Transformer", "Dense", "Dense", "Normalize"], "module 1 ('sentence_transformers.models.Transformer', "
                                                                 "path '') follows a Pooling module"),
    (["Transformer", "Pooling", "Pooling", "Dense", "Normalize"], "module 2 ('sentence_transformers.models.Pooling', "
                                                                   "path '1_Pooling') follows a Pooling module"),
])
def test_st_modules_refuse_an_order_the_graph_cannot_reproduce(tiny_model, private_copy, order, culprit):
    """The graph pools, then applies the Dense layers, then normalizes: Normalize before a Dense layer
    (or a Dense layer before the pooling) gives other vectors than sentence-transformers would."""
    path = private_copy(tiny_model("qwen3", dtype="bfloat16", dense=True), "m")

    def reorder(modules):
        by_kind: dict[str, list] = {}
        for m in modules:
            by_kind.setdefault(m["type"].rsplit(".", 1)[-1], []).append(m)
        taken = {kind: 0 for kind in by_kind}
        result = []
        for kind in order:
            result.append(by_kind[kind][min(taken[kind], len(by_kind[kind]) - 1)])
            taken[kind] += 1
        return result

    _rewrite_modules(path, reorder)
    with pytest.raises(BitnetOnnxError, match="the exported graph builds Transformer -> Pooling -> Dense -> Normalize") as error:
        _st_modules(path, "qwen3")
    assert culprit in str(error.value) and "\n" not in str(error.value)


def test_st_modules_of_the_valid_folders(tiny_model):
    """The factory's folders (with and without Dense, without Normalize) read as their stacks say."""
    for options, dense, normalize in (({}, 0, True), ({"dense": True}, 2, True), ({"normalize": False}, 0, False)):
        folder = open_model(tiny_model("gemma3", **options))
        st = folder.st_modules()
        assert (len(st.dense), st.normalize, st.pooling) == (dense, normalize, "mean"), options
