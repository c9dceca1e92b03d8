"""What a sentence-transformers folder adds on top of the transformer: pooling, dense layers,
normalization, prompts and the maximum sequence length.

Read from modules.json and each module's folder, as sentence-transformers itself does: the modules
in the list's order, as one stack. The graph builds one stack shape only, the transformer, then
one Pooling, then Dense layers, then one Normalize (``STAGES``); a module of another type, or one
out of that order, is refused with a one-line error naming it, never dropped.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import ArchSpec, positive_value
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import read_json, read_json_object
from bitnet_onnx.safetensors_file import index_safetensors, load_entry

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
MODULES_NAME = "modules.json"
MODULE_CONFIG_NAME = "config.json"
# modules.json type (sentence_transformers.models.<name>) -> its place in the stack the graph builds
STAGES = {"Transformer": 0, "Pooling": 1, "Dense": 2, "Normalize": 3}
REPEATABLE = ("Dense",)  # the other modules appear at most once
ST_PACKAGE = "sentence_transformers."


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


@dataclass(frozen=True)
class StModule:
    kind: str  # a key of STAGES
    path: str  # its folder, relative to the model folder ("" for the transformer)


def _module_kind(module: dict) -> str | None:
    """The STAGES key of a modules.json entry, None for a type the graph cannot build."""
    type_name = str(module.get("type", ""))
    kind = type_name.rsplit(".", 1)[-1]
    return kind if type_name.startswith(ST_PACKAGE) and kind in STAGES else None


def read_module_stack(path: Path) -> list[StModule]:
    """modules.json's modules in order (none without the file); a one-line error naming the module
    (index, type, path) for an unknown type or an order other than ``STAGES``'."""
    modules_file = path / MODULES_NAME
    modules = read_json(modules_file) if os.path.lexists(modules_file) else []
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise BitnetOnnxError(f"{modules_file}: expected a list of modules (JSON objects)")
    stack: list[StModule] = []
    for i, module in enumerate(modules):
        kind = _module_kind(module)
        where = f"{modules_file}: module {i} ({module.get('type')!r}, path {str(module.get('path', ''))!r})"
        if kind is None:
            raise BitnetOnnxError(f"{where} is not a module the exported graph can build "
                                  f"(it builds {', '.join(ST_PACKAGE + 'models.' + k for k in STAGES)})")
        previous = stack[-1].kind if stack else None
        if previous is not None and (STAGES[kind] < STAGES[previous] or (kind == previous and kind not in REPEATABLE)):
            raise BitnetOnnxError(f"{where} follows a {previous} module; the exported graph builds "
                                  f"{' -> '.join(STAGES)} in that order (each once, Dense any number of times)")
        stack.append(StModule(kind, str(module.get("path", ""))))
    return stack


def choose_pooling(stored: str | None, override: str | None, arch: ArchSpec, source: str, stored_as: str,
                   missing: str) -> tuple[str, bool]:
    """(pooling, whether the source named it): the source's own pooling (``stored``, which --pooling
    ``override`` must agree with), else --pooling, else the architecture's default (with a warning).

    ``stored_as`` names where the source keeps it, ``missing`` says that it has none; both sources
    (HF folder, GGUF file) word their errors through them.
    """
    if override is not None and override not in POOLINGS:
        raise BitnetOnnxError(f"--pooling {override!r} is not one of {', '.join(POOLINGS)}")
    if stored is not None:
        if override not in (None, stored):
            raise BitnetOnnxError(f"{source}: --pooling {override} contradicts its {stored_as} ({stored})")
        return stored, True
    if override is not None:
        return override, False
    if arch.default_pooling is None:
        raise BitnetOnnxError(f"{source}: {missing} and {arch.name} has no default pooling; "
                              f"pass --pooling {'|'.join(POOLINGS)}")
    log.warning("%s: %s; using %s's default pooling %r (--pooling %s chooses)", source, missing, arch.name,
                arch.default_pooling, "|".join(POOLINGS))
    return arch.default_pooling, False


def _read_pooling(folder: Path) -> tuple[str, bool]:
    config_file = folder / MODULE_CONFIG_NAME
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
    config_file = folder / MODULE_CONFIG_NAME
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


def read_st_modules(path: str | Path, arch: ArchSpec, hidden: int,
                    pooling_override: str | None = None) -> StModules:
    """Read a sentence-transformers folder whose transformer gives ``hidden``-wide token embeddings.

    ``pooling_override`` (--pooling) is the pooling of a folder without a Pooling module; with one,
    it must agree with it.
    """
    path = Path(path)
    pooling, pooling_path, include_prompt = None, None, True
    normalize, dense = False, []
    for module in read_module_stack(path):
        folder = path / module.path
        if module.kind == "Pooling":
            (pooling, include_prompt), pooling_path = _read_pooling(folder), module.path
        elif module.kind == "Dense":
            dense.append(_read_dense(folder))
        elif module.kind == "Normalize":
            normalize = True
    pooling, from_config = choose_pooling(
        pooling, pooling_override, arch, str(path), stored_as=f"{pooling_path} module",
        missing=f"no sentence-transformers Pooling module ({MODULES_NAME} -> 1_Pooling/{MODULE_CONFIG_NAME})")
    width = hidden
    for i, layer in enumerate(dense):
        if width and layer.weight.shape[1] != width:
            raise BitnetOnnxError(f"{path}: Dense layer {i} takes {layer.weight.shape[1]} inputs, "
                                  f"the previous module gives {width}")
        width = layer.weight.shape[0]

    st_config_file = path / "config_sentence_transformers.json"
    st_config = read_json_object(st_config_file) if os.path.lexists(st_config_file) else {}
    prompts = {str(k): str(v) for k, v in (st_config.get("prompts") or {}).items()}
    default_prompt = st_config.get("default_prompt_name")
    if default_prompt is not None and default_prompt not in prompts:
        raise BitnetOnnxError(f"{st_config_file}: default_prompt_name {default_prompt!r} is not in prompts")
    bert_file = path / "sentence_bert_config.json"
    bert = read_json_object(bert_file) if os.path.lexists(bert_file) else {}
    max_len = positive_value(bert, "max_seq_length", str(bert_file), int) if bert.get("max_seq_length") is not None else None
    return StModules(pooling=pooling, normalize=normalize, dense=dense, prompts=prompts,
                     default_prompt_name=default_prompt, max_seq_length=max_len,
                     dimension=int(width), include_prompt=include_prompt, pooling_from_config=from_config)
