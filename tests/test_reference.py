"""The PyTorch reference: BitLinear numerics, HF semantics kept, positions from the mask, pooling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bitnet_onnx.reference import Reference, _bitlinear_class
from bitnet_onnx.ternary import pack_i2s, i2s_matmul_reference, rms_norm_f32, ternarize


def test_bitlinear_is_the_op_reference():
    rng = np.random.default_rng(0)
    w = (0.02 * rng.standard_normal((96, 256))).astype(np.float32)
    g = (1 + 0.1 * rng.standard_normal(256)).astype(np.float32)
    x = (3 * rng.standard_normal((2, 7, 256))).astype(np.float32)
    t, s_w = ternarize(w)
    BitLinear = _bitlinear_class()
    got = BitLinear(t, s_w, g, 1e-6, True)(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, i2s_matmul_reference(x, pack_i2s(t), s_w, g, 1e-6))
    fake = BitLinear(t, s_w, g, 1e-6, False)(torch.from_numpy(x)).numpy()
    want = rms_norm_f32(x, g, 1e-6) @ (t.astype(np.float32) * np.float32(s_w)).T
    np.testing.assert_allclose(fake, want, rtol=1e-5, atol=1e-6)


def test_standard_model_is_plain_transformers(qwen3_standard):
    import transformers

    ref = Reference(qwen3_standard, f16_embeddings=False)
    hf = transformers.Qwen3Model.from_pretrained(str(qwen3_standard), dtype=torch.float32, attn_implementation="eager")
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    with torch.no_grad():
        want = hf(input_ids=ids).last_hidden_state.numpy()
    _, tokens = ref.encode(ids.numpy(), np.ones_like(ids.numpy()))
    np.testing.assert_allclose(tokens, want, rtol=1e-5, atol=1e-5)


def test_bitnet_projections_are_replaced(gemma3_bitnet):
    ref = Reference(gemma3_bitnet)
    q = ref.model.layers[0].self_attn.q_proj
    assert type(q).__name__ == "BitLinear" and q.quantize and q.norm_in is not None
    assert not Reference(gemma3_bitnet, activations="float").model.layers[1].mlp.down_proj.quantize


def test_left_padding_equals_unpadded(gemma3_bitnet):
    ref = Reference(gemma3_bitnet)
    ids = np.array([[0, 0, 0, 5, 6, 7, 8, 9]], np.int64)
    mask = np.array([[0, 0, 0, 1, 1, 1, 1, 1]], np.int64)
    padded, padded_tokens = ref.encode(ids, mask)
    alone, alone_tokens = ref.encode(ids[:, 3:], mask[:, 3:])
    np.testing.assert_allclose(padded, alone, atol=1e-5)
    np.testing.assert_allclose(padded_tokens[:, 3:], alone_tokens, atol=1e-4)


def test_f16_embeddings_match_the_export_storage(gemma3_bitnet):
    table = Reference(gemma3_bitnet).model.get_input_embeddings().weight.detach().numpy()
    np.testing.assert_array_equal(table, table.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("pooling,index", [("lasttoken", [3, 4]), ("cls", [1, 0])])
def test_token_pooling_uses_the_mask(gemma3_bitnet, pooling, index):
    ref = Reference(gemma3_bitnet)
    object.__setattr__(ref, "st", type(ref.st)(pooling=pooling, normalize=False, dimension=ref.st.dimension))
    tokens = np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)
    mask = np.array([[0, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    np.testing.assert_array_equal(ref.pool(tokens, mask), tokens[[0, 1], index])


def test_mean_pooling_ignores_padding(gemma3_bitnet):
    ref = Reference(gemma3_bitnet)
    tokens = np.random.default_rng(0).standard_normal((1, 4, 3)).astype(np.float32)
    got = ref.pool(tokens, np.array([[0, 1, 1, 0]]))
    want = tokens[0, 1:3].mean(0)
    np.testing.assert_allclose(got[0], want / np.linalg.norm(want), rtol=1e-6)


@pytest.mark.parametrize("source", ["folder", "i2s-gguf"])
def test_a_tensor_transformers_did_not_take_is_refused(tiny_model, tmp_path, monkeypatch, source):
    """A tensor the model does not hold as read (from_pretrained leaves a missing one random and only warns;
    load_state_dict(strict=False) passes over a name it lacks) is named, on both ways the reference loads:
    transformers' own loading of a folder, and our reader's I2_S GGUF (checked against what it gave)."""
    from bitnet_onnx.convert_gguf.writer import convert
    from bitnet_onnx.errors import BitnetOnnxError

    model = tiny_model("qwen3")
    if source == "i2s-gguf":
        model = convert(model, tmp_path / "m.gguf", "i2_s", pre_tokenizer="qwen2", progress=False)
    Reference(model)  # as read: accepted
    load_state_dict = torch.nn.Module.load_state_dict
    from_pretrained = Reference._from_pretrained

    def without_final_norm(module, state, *args, **kwargs):
        return load_state_dict(module, {k: v for k, v in state.items() if k != "norm.weight"}, *args, **kwargs)

    def with_final_norm_changed(reference, cls, torch_module):
        hf = from_pretrained(reference, cls, torch_module)
        with torch.no_grad():
            hf.norm.weight.add_(1.0)
        return hf

    monkeypatch.setattr(torch.nn.Module, "load_state_dict", without_final_norm)
    monkeypatch.setattr(Reference, "_from_pretrained", with_final_norm_changed)
    with pytest.raises(BitnetOnnxError, match="reference: transformers did not load norm.weight from"):
        Reference(model)
