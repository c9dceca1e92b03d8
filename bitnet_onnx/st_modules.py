"""What a sentence-transformers folder adds on top of the transformer: pooling, dense layers,
normalization, prompts and the maximum sequence length.

Read from modules.json and each module's folder, as sentence-transformers itself does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import ArchSpec, positive_value
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.weights import CONFIG_NAME, index_safetensors, load_entry, read_json, read_json_object

log = logging.getLogger(__name__)

# our pooling name -> its flag in sentence-transformers' 1_Pooling/config.json
POOLING_FLAGS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
                 "lasttoken": "pooling_mode_lasttoken"}
POOLINGS = tuple(POOLING_FLAGS)
UNSUPPORTED_POOLING_FLAGS = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                             "pooling_mode_weightedmean_tokens")
L2_NORM_EPS = 1e-12  # sentence-transformers' Normalize module (torch.nn.functional.normalize)
# Dense activation_function (torch class path) -> short name (arch.ACTIVATIONS)
DENSE_ACTIVATIONS = {"torch.nn.modules.linear.Identity": "identity", "torch.nn.Identity": "identity",
               "torch.nn.modules.activation.Tanh": "tanh", "torch.nn.Tanh": "tanh",
               "torch.nn.modules.activation.GELU": "gelu", "torch.nn.modules.activation.ReLU": "relu",
               "torch.nn.modules.activation.Sigmoid": "sigmoid"}


@dataclass(frozen=True)
class DenseLayer:
    weight: np.ndarray  # float32 [out, in]
    bias: np.ndarray | None  # float32 [out]
    activation: str  # a value of DENSE_ACTIVATIONS


@dataclass(frozen=True)
class StModules:
    pooling: str  # one of POOLINGS
    normalize: bool
    dense: list[DenseLayer] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    max_seq_length: int | None = None
    dimension: int = 0  # width of the final sentence embedding
    include_prompt: bool = True  # pooling includes the prompt's tokens
    pooling_from_config: bool = True  # False: arch default used (no Pooling module)


def _module_type(module: dict) -> str:
    return str(module.get("type", "")).rsplit(".", 1)[-1]


def _read_pooling(folder: Path) -> tuple[str, bool]:
    config_file = folder / CONFIG_NAME
    config = read_json_object(config_file)
    by_flag = {flag: name for name, flag in POOLING_FLAGS.items()}
    on = [flag for flag in (*by_flag, *UNSUPPORTED_POOLING_FLAGS) if config.get(flag)]
    mode = config.get("pooling_mode")
    if mode and not on:  # newer sentence-transformers write a single "pooling_mode"
        on = [POOLING_FLAGS.get(mode, f"pooling_mode {mode!r}")]
    if len(on) != 1:
        raise BitnetOnnxError(f"{config_file}: expected exactly one pooling mode, found {on or 'none'}")
    if on[0] not in by_flag:
        raise BitnetOnnxError(f"{config_file}: {on[0]} is not supported; supported: {', '.join(POOLINGS)}")
    return by_flag[on[0]], bool(config.get("include_prompt", True))


def _read_dense(folder: Path) -> DenseLayer:
    config_file = folder / CONFIG_NAME
    config = read_json_object(config_file)
    act_name = config.get("activation_function", "torch.nn.modules.linear.Identity")
    if act_name not in DENSE_ACTIVATIONS:
        raise BitnetOnnxError(f"{config_file}: activation_function {act_name!r} is not supported")
    weights = folder / "model.safetensors"
    if not weights.is_file():
        other = "pytorch_model.bin" if (folder / "pytorch_model.bin").is_file() else "no weights file"
        raise BitnetOnnxError(f"{folder}: Dense weights must be model.safetensors (found {other}); "
                              "re-save the model with safe_serialization=True")
    entries = index_safetensors(weights)
    if "linear.weight" not in entries:
        raise BitnetOnnxError(f"{weights}: tensor linear.weight is missing")
    weight = load_entry(entries["linear.weight"], "linear.weight")
    out_f, in_f = int(config.get("out_features", weight.shape[0])), int(config.get("in_features", weight.shape[-1]))
    if weight.shape != (out_f, in_f):
        raise BitnetOnnxError(f"{weights}: tensor linear.weight has shape {weight.shape}, "
                              f"{config_file.name} implies {(out_f, in_f)}")
    bias = None
    if config.get("bias", True) and "linear.bias" in entries:
        bias = load_entry(entries["linear.bias"], "linear.bias")
        if bias.shape != (out_f,):
            raise BitnetOnnxError(f"{weights}: tensor linear.bias has shape {bias.shape}, expected {(out_f,)}")
    elif config.get("bias", True):
        raise BitnetOnnxError(f"{weights}: tensor linear.bias is missing ({config_file.name} says bias: true)")
    for name, t in (("linear.weight", weight), ("linear.bias", bias)):
        if t is not None and not np.all(np.isfinite(t)):
            raise BitnetOnnxError(f"{weights}: tensor {name} has non-finite values (NaN or Inf)")
    return DenseLayer(weight, bias, DENSE_ACTIVATIONS[act_name])


def read_st_modules(path: str | Path, arch: ArchSpec, hidden: int | None = None,
                    pooling_override: str | None = None) -> StModules:
    """Read a sentence-transformers folder. ``hidden`` defaults to config.json's hidden_size.

    ``pooling_override`` (--pooling) is the pooling of a folder without a Pooling module; with one,
    it must agree with it.
    """
    path = Path(path)
    if hidden is None:
        hidden = int(read_json_object(path / CONFIG_NAME).get("hidden_size", 0))
    modules_file = path / "modules.json"
    modules = read_json(modules_file) if modules_file.is_file() else []
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise BitnetOnnxError(f"{modules_file}: expected a list of modules (JSON objects)")
    pooling, include_prompt, from_config = None, True, True
    normalize, dense = False, []
    for module in sorted(modules, key=lambda m: int(m.get("idx", 0))):
        kind, folder = _module_type(module), path / str(module.get("path", ""))
        if kind == "Pooling":
            pooling, include_prompt = _read_pooling(folder)
        elif kind == "Dense":
            dense.append(_read_dense(folder))
        elif kind == "Normalize":
            normalize = True
    if pooling_override is not None and pooling_override not in POOLINGS:
        raise BitnetOnnxError(f"--pooling {pooling_override!r} is not one of {', '.join(POOLINGS)}")
    if pooling is not None and pooling_override not in (None, pooling):
        raise BitnetOnnxError(f"{path}: --pooling {pooling_override} contradicts its 1_Pooling module ({pooling})")
    if pooling is None:
        from_config = False
        if pooling_override is not None:
            pooling = pooling_override
        elif arch.default_pooling is None:
            raise BitnetOnnxError(f"{path}: no sentence-transformers Pooling module (modules.json -> "
                                  f"1_Pooling/config.json) and {arch.name} has no default pooling; "
                                  f"pass --pooling {'|'.join(POOLINGS)}")
        else:
            pooling = arch.default_pooling
            log.warning("%s: no Pooling module in modules.json; using %s's default pooling %r "
                        "(--pooling %s chooses)", path, arch.name, pooling, "|".join(POOLINGS))
    width = hidden
    for i, layer in enumerate(dense):
        if width and layer.weight.shape[1] != width:
            raise BitnetOnnxError(f"{path}: Dense layer {i} takes {layer.weight.shape[1]} inputs, "
                                  f"the previous module gives {width}")
        width = layer.weight.shape[0]

    st_config_file = path / "config_sentence_transformers.json"
    st_config = read_json_object(st_config_file) if st_config_file.is_file() else {}
    prompts = {str(k): str(v) for k, v in (st_config.get("prompts") or {}).items()}
    default_prompt = st_config.get("default_prompt_name")
    if default_prompt is not None and default_prompt not in prompts:
        raise BitnetOnnxError(f"{st_config_file}: default_prompt_name {default_prompt!r} is not in prompts")
    bert_file = path / "sentence_bert_config.json"
    bert = read_json_object(bert_file) if bert_file.is_file() else {}
    max_len = positive_value(bert, "max_seq_length", str(bert_file), int) if bert.get("max_seq_length") is not None else None
    return StModules(pooling=pooling, normalize=normalize, dense=dense, prompts=prompts,
                     default_prompt_name=default_prompt, max_seq_length=max_len,
                     dimension=int(width), include_prompt=include_prompt, pooling_from_config=from_config)
