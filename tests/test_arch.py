"""The architecture descriptions and config normalization (transformers-4 and -5 configs), and the
"Add an architecture" recipe: every architecture has a row in each table the recipe names."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

from bitnet_onnx.arch import (
    ACTIVATIONS,
    ARCHITECTURES,
    EMBEDDING,
    FULL,
    HEAD_NORM,
    LINEAR,
    NORM,
    NORM_IN,
    PROJECTIONS,
    REAL_SHAPES,
    SLIDING,
    ConfigError,
    ModelConfig,
    detect_arch,
)
from bitnet_onnx.convert_gguf.tokenizer import KNOWN_PRE_TOKENIZERS, SPM_PRE_TOKENIZER
from bitnet_onnx.st_modules import POOLING_FLAGS
from bitnet_onnx.testing.archs import TESTING_ARCHS

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


# -- the "Add an architecture" recipe (docs/contributing.md): a skipped step fails here, naming the arch --------
REPO_TESTS = Path(__file__).resolve().parent
TENSOR_KINDS = {EMBEDDING, LINEAR, NORM, HEAD_NORM, NORM_IN}


def _recipe_gaps(name: str) -> list[str]:
    """The recipe's rows that architecture ``name`` lacks (empty when every step was done)."""
    from bitnet_onnx.commands.demo import DEMO_SHAPES

    spec, gaps = ARCHITECTURES[name], []
    if spec.activation not in ACTIVATIONS:
        gaps.append(f"activation {spec.activation!r} is not in arch.ACTIVATIONS (nor export/ops.py's table)")
    if name not in REAL_SHAPES:
        gaps.append("no row in arch.REAL_SHAPES (bench --shape, demo)")
    elif name not in DEMO_SHAPES:
        gaps.append("no demo shape (commands/demo.py's DEMO_SHAPES follows arch.REAL_SHAPES)")
    if name not in TESTING_ARCHS:
        gaps.append("no testing record in bitnet_onnx/testing/archs.py")
    return gaps


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_recipe_every_architecture_has_every_row(name):
    assert _recipe_gaps(name) == [], name


def test_recipe_check_names_each_skipped_step(monkeypatch):
    """An architecture added to ARCHITECTURES alone: each skipped step is named."""
    monkeypatch.setitem(ARCHITECTURES, "llama", replace(ARCHITECTURES["qwen3"], name="llama", activation="swiglu"))
    assert _recipe_gaps("llama") == [
        "activation 'swiglu' is not in arch.ACTIVATIONS (nor export/ops.py's table)",
        "no row in arch.REAL_SHAPES (bench --shape, demo)",
        "no testing record in bitnet_onnx/testing/archs.py",
    ]


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_recipe_arch_spec(name):
    """Step 1: the ArchSpec's own facts agree with the tables they name."""
    import bitnet_onnx.export.ops  # noqa: F401  (its import-time assertion: a graph node for every activation)

    spec = ARCHITECTURES[name]
    assert spec.name == name
    assert spec.default_pooling is None or spec.default_pooling in POOLING_FLAGS
    for model_type in spec.model_types:
        assert detect_arch({"model_type": model_type}) is spec, f"{name}: model_type {model_type!r} is another's"
    roles = {t.role for t in spec.tensors}
    assert {spec.post_attn_norm, spec.post_ffn_norm} - {None} <= roles
    dims = set(ModelConfig.from_dict(QWEN, ARCHITECTURES["qwen3"]).dims)
    for t in spec.tensors:
        assert t.kind in TENSOR_KINDS and set(t.shape) <= dims, (name, t.role)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_recipe_real_shape_and_testing_record(name):
    """Step 2: the real shape and the testing record make valid configs of both transformers styles."""
    from bitnet_onnx.testing import factory

    spec, record = ARCHITECTURES[name], TESTING_ARCHS[name]
    assert record.name == REAL_SHAPES[name].arch == name
    assert detect_arch(record.config_base) is spec
    assert set(record.rope) == ({FULL, SLIDING} if spec.sliding_window else {FULL}), f"{name}: rope bases"
    assert record.config_token_ids and set(record.real_token_ids) == set(record.config_token_ids)
    pre_tokenizers = {*KNOWN_PRE_TOKENIZERS.values(), SPM_PRE_TOKENIZER}
    assert record.gguf_tokenizer[1] in pre_tokenizers and record.llama_cpp_pre_tokenizer in {*pre_tokenizers, None}
    for shape in (REAL_SHAPES[name].config, record.tiny_shape):
        v5, v4 = (factory.model_config(name, shape, style) for style in ("v5", "v4"))
        assert v5 == v4, f"{name}: the transformers-5 and -4 configs of {shape} differ"


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_recipe_bench_and_demo_offer_it(name):
    """What follows from step 2: bench --shape offers the real and the tiny shape, the demo keeps a few layers."""
    from bitnet_onnx.bench.cache import model_shapes
    from bitnet_onnx.commands.demo import DEMO_SHAPES

    real = REAL_SHAPES[name]
    shapes = model_shapes()
    assert shapes[real.name] == (name, real.name) and shapes[f"{name}-tiny"] == (name, "tiny")
    assert 0 < DEMO_SHAPES[name]["num_hidden_layers"] == real.demo_layers <= real.config["num_hidden_layers"]


def test_recipe_tables_name_only_architectures():
    assert set(REAL_SHAPES) <= set(ARCHITECTURES) and set(TESTING_ARCHS) <= set(ARCHITECTURES)


def test_recipe_reference_class_exists():
    """The PyTorch reference loads each architecture with transformers' own class (ArchSpec.hf_class)."""
    transformers = pytest.importorskip("transformers")
    for spec in ARCHITECTURES.values():
        assert hasattr(transformers, spec.hf_class), f"{spec.name}: transformers has no {spec.hf_class}"


def test_recipe_tests_follow_architectures():
    """Step 3: the suites parametrize over ARCHITECTURES; no test file lists the architectures by hand."""
    names = "|".join(re.escape(n) for n in ARCHITECTURES)
    literal = re.compile(rf"""[\[(]\s*["'](?:{names})["']\s*,\s*["'](?:{names})["']""")
    found = [f"{f.relative_to(REPO_TESTS)}:{n}" for f in sorted(REPO_TESTS.rglob("*.py"))
             for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1) if literal.search(line)]
    assert not found, f"hard-coded lists of architectures (use bitnet_onnx.arch.ARCHITECTURES): {found}"
