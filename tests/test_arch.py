"""The architecture descriptions and config normalization (transformers-4 and -5 configs)."""

import pytest

from bitnet_onnx.arch import ARCHITECTURES, FULL, LINEAR, NORM_IN, PROJECTIONS, SLIDING, ConfigError, ModelConfig, detect_arch

GEMMA_V5 = {
    "model_type": "gemma3_text", "hidden_size": 640, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 256, "intermediate_size": 2048, "num_hidden_layers": 6, "vocab_size": 262144,
    "query_pre_attn_scalar": 256, "sliding_window": 512, "hidden_activation": "gelu_pytorch_tanh",
    "layer_types": [SLIDING] * 5 + [FULL],
    "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
}
GEMMA_V4 = {k: v for k, v in GEMMA_V5.items() if k not in ("layer_types", "rope_parameters")} | {
    "sliding_window_pattern": 6, "rope_theta": 1e6, "rope_local_base_freq": 1e4}
QWEN = {"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 3072, "num_hidden_layers": 28, "vocab_size": 151936,
        "rope_theta": 1e6, "hidden_act": "silu"}


def test_gemma3_v4_and_v5_configs_agree():
    a = ModelConfig.from_dict(GEMMA_V5, detect_arch(GEMMA_V5))
    b = ModelConfig.from_dict(GEMMA_V4, detect_arch(GEMMA_V4))
    assert a == b
    assert a.layer_types == (SLIDING,) * 5 + (FULL,)
    assert (a.rope_theta, a.rope_local_theta, a.sliding_window) == (1e6, 1e4, 512)
    assert a.query_scale == pytest.approx(256 ** -0.5)
    assert a.embed_scale == pytest.approx(640 ** 0.5)
    assert a.causal


def test_qwen3_config_dims_and_shapes():
    cfg = ModelConfig.from_dict(QWEN, detect_arch(QWEN))
    assert cfg.dims == {"hidden": 1024, "q_dim": 2048, "kv_dim": 1024, "ffn": 3072, "head_dim": 128, "vocab": 151936}
    arch = ARCHITECTURES["qwen3"]
    assert [cfg.shape(arch.tensor(p.norm_in)) for p in PROJECTIONS] == [(1024,), (1024,), (1024,), (2048,), (1024,), (1024,), (3072,)]
    assert cfg.shape(arch.tensor("attn_q")) == (2048, 1024)
    assert cfg.query_scale == pytest.approx(128 ** -0.5) and cfg.embed_scale == 1.0
    assert cfg.layer_types == (FULL,) * 28


def test_every_arch_names_each_projection_and_its_norm_in():
    for arch in ARCHITECTURES.values():
        kinds = {t.role: t.kind for t in arch.tensors}
        for p in PROJECTIONS:
            assert kinds[p.weight] == LINEAR and kinds[p.norm_in] == NORM_IN
        gguf = [t.gguf for t in arch.tensors]
        assert len(gguf) == len(set(gguf))


def test_bidirectional_config():
    cfg = ModelConfig.from_dict(GEMMA_V5 | {"use_bidirectional_attention": True}, ARCHITECTURES["gemma3"])
    assert not cfg.causal


@pytest.mark.parametrize("config, asserted, message", [
    ({"model_type": "llama"}, None, "unsupported model_type 'llama'; supported: qwen3 (qwen3), gemma3_text (gemma3)"),
    (QWEN, "gemma3", "--arch gemma3 does not match config.json: model_type 'qwen3' is qwen3"),
    (QWEN, "bert", "--arch 'bert' is not supported"),
])
def test_detect_arch_errors(config, asserted, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("'", "'")):
        detect_arch(config, asserted)


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": None}, "missing 'hidden_size'"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}, "rope_type 'yarn'"),
    ({"layer_types": [SLIDING] * 28, "sliding_window": 64}, "qwen3 does not support sliding_attention"),
    ({"layer_types": [FULL] * 3}, "layer_types has 3 entries for 28 layers"),
    ({"hidden_act": "relu"}, "activation 'relu' is not supported"),
])
def test_config_errors_name_the_key(change, message):
    config = {k: v for k, v in (QWEN | change).items() if v is not None}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        ModelConfig.from_dict(config, ARCHITECTURES["qwen3"])


def test_gemma3_without_a_pattern_takes_transformers_default_of_six():
    config = {k: v for k, v in GEMMA_V4.items() if k != "sliding_window_pattern"}
    assert ModelConfig.from_dict(config, ARCHITECTURES["gemma3"]).layer_types == (SLIDING,) * 5 + (FULL,)
