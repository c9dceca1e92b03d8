"""Declarative descriptions of the supported architectures, and the normalized model config.

Everything that differs between Qwen3 and Gemma3 lives here as data: HF and GGUF tensor
names, which norms exist and where, the RMSNorm form, activation, embedding scale, attention
pattern and rope. The ONNX exporter, the GGUF converter and the PyTorch reference all read it;
adding an architecture means adding an ``ArchSpec`` to ``ARCHITECTURES``, the dims of one released
model to ``REAL_SHAPES`` and a testing record to ``bitnet_onnx.testing.archs`` (docs/contributing.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bitnet_onnx.errors import BitnetOnnxError

# Activations by short name (ArchSpec.activation, sentence-transformers Dense layers), each with the
# spellings a HF config.json may use for it. export/ops.py and reference.py implement each name.
ACTIVATIONS = {
    "silu": ("silu", "swish"),
    "gelu_tanh": ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new"),
    "gelu": ("gelu",),
    "tanh": ("tanh",),
    "relu": ("relu",),
    "sigmoid": ("sigmoid",),
    "identity": ("identity", "linear"),
}

# Tensor kinds.
EMBEDDING = "embedding"  # [vocab, hidden]
LINEAR = "linear"  # a projection [out, in]; ternary in BitNet models
NORM = "norm"  # an architecture's own RMSNorm weight (form given by ArchSpec.norm_offset)
HEAD_NORM = "head_norm"  # QK per-head RMSNorm weight [head_dim] (same form as NORM)
NORM_IN = "norm_in"  # BitNet per-projection RMSNorm weight, always plain x/rms*w


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the model. Names use ``{i}`` for the layer index; shapes name config dims."""

    role: str  # canonical role, e.g. "attn_q"
    hf: str  # HF name without the optional "model." prefix
    gguf: str
    shape: tuple[str, ...]  # dims of ModelConfig.dims, e.g. ("q_dim", "hidden")
    kind: str
    per_layer: bool = True
    optional: bool = False  # NORM_IN tensors exist only in BitNet checkpoints


@dataclass(frozen=True)
class Projection:
    """A linear projection: its weight role and the role of its BitNet input norm."""

    name: str  # "q", "k", ... ; also the ONNX node name suffix
    weight: str  # role of the LINEAR tensor
    norm_in: str  # role of the NORM_IN tensor
    in_dim: str
    out_dim: str


PROJECTIONS: tuple[Projection, ...] = (
    Projection("q", "attn_q", "attn_q_norm_in", "hidden", "q_dim"),
    Projection("k", "attn_k", "attn_k_norm_in", "hidden", "kv_dim"),
    Projection("v", "attn_v", "attn_v_norm_in", "hidden", "kv_dim"),
    Projection("o", "attn_output", "attn_output_norm_in", "q_dim", "hidden"),
    Projection("gate", "ffn_gate", "ffn_gate_norm_in", "hidden", "ffn"),
    Projection("up", "ffn_up", "ffn_up_norm_in", "hidden", "ffn"),
    Projection("down", "ffn_down", "ffn_down_norm_in", "ffn", "hidden"),
)

_HF_PROJ = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
            "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def _common_tensors() -> list[TensorSpec]:
    tensors = [
        TensorSpec("token_embd", "embed_tokens.weight", "token_embd.weight", ("vocab", "hidden"), EMBEDDING, per_layer=False),
        TensorSpec("output_norm", "norm.weight", "output_norm.weight", ("hidden",), NORM, per_layer=False),
        TensorSpec("attn_norm", "layers.{i}.input_layernorm.weight", "blk.{i}.attn_norm.weight", ("hidden",), NORM),
        TensorSpec("attn_q_norm", "layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight", ("head_dim",), HEAD_NORM),
        TensorSpec("attn_k_norm", "layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight", ("head_dim",), HEAD_NORM),
    ]
    for p in PROJECTIONS:
        hf = f"layers.{{i}}.{_HF_PROJ[p.name]}"
        gguf = f"blk.{{i}}.{p.weight}"
        tensors.append(TensorSpec(p.weight, f"{hf}.weight", f"{gguf}.weight", (p.out_dim, p.in_dim), LINEAR))
        tensors.append(TensorSpec(p.norm_in, f"{hf}.norm.weight", f"{gguf}_norm_in.weight", (p.in_dim,), NORM_IN, optional=True))
    return tensors


@dataclass(frozen=True)
class ArchSpec:
    name: str  # our name and the GGUF general.architecture
    model_types: tuple[str, ...]  # config.json model_type values
    hf_class: str  # transformers model class for the reference
    activation: str  # a key of ACTIVATIONS
    norm_offset: float  # own norms compute x/rms * (offset + w)
    scale_embeddings: bool  # multiply embeddings by sqrt(hidden)
    # Ordered norm roles of one layer: attn_norm -> attention -> [post_attn_norm] -> residual,
    # ffn_norm -> MLP -> [post_ffn_norm] -> residual.
    post_attn_norm: str | None
    post_ffn_norm: str | None
    sliding_window: bool  # layers may be "sliding_attention"
    default_sliding_pattern: int | None  # every n-th layer global when a config names no pattern
    query_scale_key: str | None  # config key whose value^-0.5 scales QK (None: head_dim^-0.5)
    default_pooling: str | None  # pooling when the folder has no sentence-transformers Pooling
    append_eos: str | None  # token appended to every input (Qwen3's last-token rule)
    default_rope_theta: float  # transformers' default when a config names no rope base
    tensors: tuple[TensorSpec, ...] = field(default_factory=tuple)

    def tensor(self, role: str) -> TensorSpec:
        for t in self.tensors:
            if t.role == role:
                return t
        raise KeyError(f"architecture {self.name} has no tensor role {role!r}")

    def layer_tensors(self) -> list[TensorSpec]:
        return [t for t in self.tensors if t.per_layer]

    def global_tensors(self) -> list[TensorSpec]:
        return [t for t in self.tensors if not t.per_layer]


QWEN3 = ArchSpec(
    name="qwen3",
    model_types=("qwen3",),
    hf_class="Qwen3Model",
    activation="silu",
    norm_offset=0.0,
    scale_embeddings=False,
    post_attn_norm=None,
    post_ffn_norm=None,
    sliding_window=False,
    default_sliding_pattern=None,
    query_scale_key=None,
    default_pooling="lasttoken",
    append_eos="<|endoftext|>",
    default_rope_theta=10_000.0,
    tensors=tuple(_common_tensors() + [
        TensorSpec("ffn_norm", "layers.{i}.post_attention_layernorm.weight", "blk.{i}.ffn_norm.weight", ("hidden",), NORM),
    ]),
)

GEMMA3 = ArchSpec(
    name="gemma3",
    model_types=("gemma3_text",),
    hf_class="Gemma3TextModel",
    activation="gelu_tanh",
    norm_offset=1.0,
    scale_embeddings=True,
    post_attn_norm="post_attention_norm",
    post_ffn_norm="post_ffw_norm",
    sliding_window=True,
    default_sliding_pattern=6,
    query_scale_key="query_pre_attn_scalar",
    default_pooling=None,
    append_eos=None,
    default_rope_theta=1_000_000.0,
    tensors=tuple(_common_tensors() + [
        TensorSpec("post_attention_norm", "layers.{i}.post_attention_layernorm.weight", "blk.{i}.post_attention_norm.weight", ("hidden",), NORM),
        TensorSpec("ffn_norm", "layers.{i}.pre_feedforward_layernorm.weight", "blk.{i}.ffn_norm.weight", ("hidden",), NORM),
        TensorSpec("post_ffw_norm", "layers.{i}.post_feedforward_layernorm.weight", "blk.{i}.post_ffw_norm.weight", ("hidden",), NORM),
    ]),
)

ARCHITECTURES: dict[str, ArchSpec] = {a.name: a for a in (QWEN3, GEMMA3)}


@dataclass(frozen=True)
class RealShape:
    """A released model's dims: random-weight models of its size for ``bench --shape`` and the demo."""

    arch: str  # a key of ARCHITECTURES
    name: str  # the bench --shape name and the factory's shape name, e.g. "qwen3-0.6b"
    config: dict  # its config.json dims (HF keys; "sliding_window_pattern": every n-th layer full)
    demo_layers: int  # layers the demo keeps (the real widths, seconds to build and export)


# One released model per architecture.
REAL_SHAPES: dict[str, RealShape] = {s.arch: s for s in (
    RealShape(QWEN3.name, "qwen3-0.6b", dict(
        hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=3072,
        num_hidden_layers=28, vocab_size=151936, max_position_embeddings=32768), demo_layers=2),
    RealShape(GEMMA3.name, "gemma3-270m", dict(
        hidden_size=640, num_attention_heads=4, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
        intermediate_size=2048, num_hidden_layers=18, vocab_size=262144, sliding_window=512,
        sliding_window_pattern=6, max_position_embeddings=32768), demo_layers=3),
)}


class ConfigError(BitnetOnnxError):
    """A config.json that does not describe a supported model."""


def detect_arch(config: dict, asserted: str | None = None, source: str = "config.json") -> ArchSpec:
    """The ArchSpec for a config's model_type; ``asserted`` (--arch) must agree."""
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(config).__name__}")
    model_type = config.get("model_type")
    found = next((a for a in ARCHITECTURES.values() if model_type in a.model_types), None)
    supported = ", ".join(f"{t} ({a.name})" for a in ARCHITECTURES.values() for t in a.model_types)
    if found is None:
        raise ConfigError(f"{source}: unsupported model_type {model_type!r}; supported: {supported}")
    if asserted is not None and asserted != found.name:
        if asserted not in ARCHITECTURES:
            raise ConfigError(f"--arch {asserted!r} is not supported; choose one of {', '.join(ARCHITECTURES)}")
        raise ConfigError(f"--arch {asserted} does not match {source}: model_type {model_type!r} is {found.name}")
    return found


LOCAL_ROPE_THETA = 10_000.0  # transformers' default rope_local_base_freq (Gemma3)
FULL = "full_attention"
SLIDING = "sliding_attention"


@dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters read from config.json, same meaning for both transformers-4 and -5 configs."""

    arch: ArchSpec
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    n_layers: int
    vocab: int
    rms_eps: float
    rope_theta: float  # full-attention layers
    rope_local_theta: float  # sliding layers (== rope_theta when there are none)
    layer_types: tuple[str, ...]  # FULL or SLIDING per layer
    sliding_window: int | None
    causal: bool
    query_scale: float  # multiplies q.k
    max_positions: int

    @property
    def dims(self) -> dict[str, int]:
        return {"hidden": self.hidden, "q_dim": self.n_heads * self.head_dim,
                "kv_dim": self.n_kv_heads * self.head_dim, "ffn": self.ffn,
                "head_dim": self.head_dim, "vocab": self.vocab}

    def shape(self, t: TensorSpec) -> tuple[int, ...]:
        return tuple(self.dims[d] for d in t.shape)

    @property
    def sliding_span(self) -> tuple[int, int] | None:
        """Keys a query sees on sliding layers, as (before, after) token distances, HF semantics.

        Causal: keys [i - W + 1, i]. Bidirectional: transformers turns W into W // 2 + 1 with an
        exclusive bound (``|i - j| < W // 2 + 1``), i.e. keys [i - W // 2, i + W // 2].
        """
        if self.sliding_window is None:
            return None
        w = self.sliding_window
        return (w - 1, 0) if self.causal else (w // 2, w // 2)

    def tensor_spec(self, role: str, layer: int | None) -> TensorSpec:
        """The architecture's tensor of ``role``; an error unless ``layer`` indexes a layer of this
        model for a per-layer role."""
        try:
            spec = self.arch.tensor(role)
        except KeyError as e:
            raise BitnetOnnxError(str(e.args[0])) from None
        if spec.per_layer and (layer is None or not 0 <= layer < self.n_layers):
            raise BitnetOnnxError(f"tensor role {role} needs a layer index in 0..{self.n_layers - 1}, got {layer}")
        return spec

    def key_span(self, layer_type: str) -> tuple[int | None, int | None]:
        """Keys a query of this layer type sees, as (before, after) token distances; None = unbounded.

        The one home of the attention band: every attention strategy and the reference read it.
        """
        if layer_type == SLIDING and self.sliding_span is not None:
            return self.sliding_span
        return (None, 0) if self.causal else (None, None)

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.hidden) if self.arch.scale_embeddings else 1.0

    @classmethod
    def from_dict(cls, config: dict, arch: ArchSpec, source: str = "config.json") -> "ModelConfig":
        """The normalized config; one clear ConfigError naming ``source`` and the key for any value
        that is missing, of the wrong type or out of range, before any work is done."""
        if not isinstance(config, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(config).__name__}")

        def count(key: str, default: int | None = None) -> int:
            return positive_value(config, key, source, int, default)

        hidden = count("hidden_size")
        n_heads = count("num_attention_heads")
        n_layers = count("num_hidden_layers")
        head_dim = count("head_dim") if config.get("head_dim") is not None else hidden // n_heads
        if head_dim < 1:
            raise ConfigError(f"{source}: hidden_size {hidden} < num_attention_heads {n_heads} and no 'head_dim'")
        n_kv_heads = count("num_key_value_heads", n_heads)
        if n_heads % n_kv_heads:
            raise ConfigError(f"{source}: num_key_value_heads {n_kv_heads} does not divide num_attention_heads {n_heads}")
        rope_theta, rope_local = _rope_bases(config, arch, source)
        layer_types = _layer_types(config, arch, n_layers, source)
        sliding = None
        if SLIDING in layer_types:
            if config.get("sliding_window") is None:
                raise ConfigError(f"{source}: sliding_attention layers need a positive 'sliding_window'")
            sliding = count("sliding_window")
        if arch.query_scale_key:
            query_scale = positive_value(config, arch.query_scale_key, source, float, float(head_dim)) ** -0.5
        else:
            query_scale = head_dim ** -0.5
        causal = bool(config.get("is_causal", True)) and not bool(config.get("use_bidirectional_attention", False))
        act = config.get("hidden_act") or config.get("hidden_activation")
        expected = ACTIVATIONS[arch.activation]
        if act is not None and act not in expected:
            raise ConfigError(f"{source}: activation {act!r} is not supported for {arch.name} (expected {expected[0]})")
        return cls(
            arch=arch,
            hidden=hidden,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            ffn=count("intermediate_size"),
            n_layers=n_layers,
            vocab=count("vocab_size"),
            rms_eps=positive_value(config, "rms_norm_eps", source, float, 1e-6),
            rope_theta=rope_theta,
            rope_local_theta=rope_local,
            layer_types=layer_types,
            sliding_window=sliding,
            causal=causal,
            query_scale=query_scale,
            max_positions=count("max_position_embeddings", 32768),
        )


def positive_value(config: dict, key: str, source: str, kind: type, default=None):
    """config[key] (or ``default`` when absent) as a finite number > 0 of ``kind`` (int or float)."""
    value = config.get(key, default)
    if value is None:
        raise ConfigError(f"{source}: missing {key!r}")
    ok_type = (isinstance(value, int) or (kind is int and isinstance(value, float) and value.is_integer())) \
        if kind is int else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not math.isfinite(value) or value <= 0:
        want = "a positive integer" if kind is int else "a positive finite number"
        raise ConfigError(f"{source}: {key!r} must be {want}, got {value!r}")
    return kind(value)


def _rope_params_theta(params: dict, source: str, what: str) -> float:
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ConfigError(f"{source}: rope_type {rope_type!r} for {what} is not supported (only 'default')")
    return positive_value(params, "rope_theta", source, float)


def _rope_bases(config: dict, arch: ArchSpec, source: str) -> tuple[float, float]:
    """(full, local) rope bases from transformers-5 ``rope_parameters`` or older keys."""
    params = config.get("rope_parameters")
    if isinstance(params, dict) and params:
        if FULL in params or SLIDING in params:  # per layer type (Gemma3, transformers 5)
            full = _rope_params_theta(params.get(FULL) or params[SLIDING], source, FULL)
            local = _rope_params_theta(params.get(SLIDING) or params[FULL], source, SLIDING)
            return full, local
        theta = _rope_params_theta(params, source, "rope_parameters")
        return theta, positive_value(config, "rope_local_base_freq", source, float, theta)
    scaling = config.get("rope_scaling")
    if scaling:
        _rope_params_theta({**scaling, "rope_theta": 1.0}, source, "rope_scaling")  # checks the type only
    theta = positive_value(config, "rope_theta", source, float, arch.default_rope_theta)
    return theta, positive_value(config, "rope_local_base_freq", source, float,
                            LOCAL_ROPE_THETA if arch.sliding_window else theta)


def _layer_types(config: dict, arch: ArchSpec, n_layers: int, source: str) -> tuple[str, ...]:
    types = config.get("layer_types")
    if types:
        if len(types) != n_layers:
            raise ConfigError(f"{source}: layer_types has {len(types)} entries for {n_layers} layers")
        bad = sorted(set(types) - {FULL, SLIDING})
        if bad:
            raise ConfigError(f"{source}: unknown layer_types {bad}")
        if SLIDING in types and not arch.sliding_window:
            raise ConfigError(f"{source}: {arch.name} does not support sliding_attention layers")
        return tuple(types)
    pattern = config.get("sliding_window_pattern") or config.get("_sliding_window_pattern")
    pattern = (pattern or arch.default_sliding_pattern) if arch.sliding_window else None
    if pattern:  # every pattern-th layer is global (Gemma3 before transformers 4.53)
        return tuple(FULL if (i + 1) % int(pattern) == 0 else SLIDING for i in range(n_layers))
    return (FULL,) * n_layers
