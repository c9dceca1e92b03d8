"""A GGUF file as a model source (``model_source.ModelSource``, as ``weights.ModelFolder`` is a HF folder).

- config: the GGUF metadata keys llama.cpp and our converter write, mapped to the config.json keys
  ``ModelConfig.from_dict`` reads, so one set of rules (defaults, rope, sliding pattern) applies;
- tensors: by ArchSpec role through ``TensorSpec.gguf`` names, dequantized by gguf-py (F32, F16,
  BF16, Q8_0, Q4_K, ...); Gemma's norms, stored as (1 + w) for llama.cpp, are given back as w;
- I2_S projections: their packed codes and scale as stored (``ternary_codes``), so an export carries
  them without re-quantization; their presence, with the per-projection norms, makes it BitNet;
- pooling, normalize and prompts: from the metadata (``{arch}.pooling_type``, the ``bitnet_onnx.*``
  keys our converter writes), else the architecture's default;
- tokenizer: tokenizer.json / tokenizer_config.json rebuilt from tokenizer.ggml.* (gguf_tokenizer.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import ARCHITECTURES, HEAD_NORM, LINEAR, NORM, ArchSpec, ModelConfig, TensorSpec
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import to_float16
from bitnet_onnx.gguf_file import (
    DEFAULT_PROMPT_KEY, I2S_TYPE, INCLUDE_PROMPT_KEY, MAX_SEQ_LENGTH_KEY, NORMALIZE_KEY, POOLING_NAMES,
    PROMPT_NAMES_KEY, PROMPTS_KEY, check_gguf_header, dequantize, metadata, open_gguf, read_i2s_packed, tensor_shape,
)
from bitnet_onnx.gguf_tokenizer import tokenizer_files
from bitnet_onnx.model_source import bitnet_norms_present
from bitnet_onnx.st_modules import StModules, choose_pooling

# config.json key -> GGUF key under "{arch}."
_REQUIRED = {"hidden_size": "embedding_length", "num_attention_heads": "attention.head_count",
             "num_hidden_layers": "block_count", "intermediate_size": "feed_forward_length"}
_OPTIONAL = {"num_key_value_heads": "attention.head_count_kv", "head_dim": "attention.key_length",
             "rms_norm_eps": "attention.layer_norm_rms_epsilon", "rope_theta": "rope.freq_base",
             "rope_local_base_freq": "rope.freq_base_swa", "max_position_embeddings": "context_length",
             "sliding_window": "attention.sliding_window",
             "query_pre_attn_scalar": "attention.query_pre_attn_scalar"}


def _short(value):
    """A float32 metadata value as the shortest decimal that rounds to it (1e-06, not 9.99999997e-07)."""
    return float(str(np.float32(value))) if isinstance(value, float) else value


def _whole(value):
    """A GGUF float that stands for an integer config value (transformers types query_pre_attn_scalar
    as int and refuses 256.0) as that int; a value of no whole number stays the float it is."""
    rounded = round(float(value))
    return rounded if abs(float(value) - rounded) <= 1e-3 * max(1, abs(rounded)) else _short(value)


class GgufModel:
    """A GGUF file: config, architecture, tensor-by-tensor float32 access and I2_S codes.

    ``check_pooling``: check ``pooling`` against the file (``st_modules``' rule) from the header's
    scalar keys, before gguf-py's reader parses the file's arrays (a 262k vocabulary)."""

    def __init__(self, path: str | Path, arch: str | None = None, check_pooling: bool = False,
                 pooling: str | None = None):
        self.path = Path(path)
        self.meta = check_gguf_header(self.path)  # the scalar keys, until the reader has them all
        self.arch: ArchSpec = self._arch(arch)
        if check_pooling:
            self._pooling(pooling)
        self.reader = open_gguf(self.path, checked=True)
        self.meta = metadata(self.reader)
        self._tensors = {t.name: t for t in self.reader.tensors}
        self.config: dict = self._config()
        self.cfg: ModelConfig = ModelConfig.from_dict(self.config, self.arch, source=str(self.path))
        self.is_bitnet = self._detect_bitnet()
        self._tokenizer_tmp: tempfile.TemporaryDirectory | None = None

    # -- config -----------------------------------------------------------------------------------
    def _arch(self, asserted: str | None) -> ArchSpec:
        name = self.meta.get("general.architecture")
        if name not in ARCHITECTURES:
            raise BitnetOnnxError(f"{self.path}: general.architecture {name!r} is not supported; "
                                  f"supported: {', '.join(ARCHITECTURES)}")
        if asserted is not None and asserted != name:
            raise BitnetOnnxError(f"--arch {asserted} does not match {self.path}: general.architecture is {name}")
        return ARCHITECTURES[name]

    def _key(self, key: str):
        return self.meta.get(f"{self.arch.name}.{key}")

    def _config(self) -> dict:
        """The metadata as the config.json keys ModelConfig reads."""
        a = self.arch.name
        config: dict = {"model_type": self.arch.model_types[0]}
        for hf, key in _REQUIRED.items():
            if self._key(key) is None:
                raise BitnetOnnxError(f"{self.path}: metadata key {a}.{key} is missing")
            config[hf] = self._key(key)
        config.update({hf: _short(self._key(key)) for hf, key in _OPTIONAL.items() if self._key(key) is not None})
        embd = self._tensors.get(self.arch.tensor("token_embd").gguf)
        vocab = self._key("vocab_size") or (int(embd.shape[1]) if embd is not None else None)
        config["vocab_size"] = vocab or len(self.meta.get("tokenizer.ggml.tokens") or [])
        if "query_pre_attn_scalar" not in config and self._key("attention.scale"):
            config["query_pre_attn_scalar"] = float(np.float32(float(self._key("attention.scale")) ** -2))
        if "query_pre_attn_scalar" in config:
            config["query_pre_attn_scalar"] = _whole(config["query_pre_attn_scalar"])
        pattern = self._key("attention.sliding_window_pattern")
        if isinstance(pattern, list):  # per layer, True = sliding (our converter, llama.cpp's Gemma3n style)
            config["layer_types"] = ["sliding_attention" if s else "full_attention" for s in pattern]
        elif pattern:
            config["sliding_window_pattern"] = int(pattern)
        if self._key("attention.causal") is False:
            config["use_bidirectional_attention"] = True
        scaling = self._key("rope.scaling.type")
        if scaling not in (None, "none"):
            config["rope_scaling"] = {"rope_type": scaling}
        pad = self.meta.get("tokenizer.ggml.padding_token_id")
        if pad is not None:
            config["pad_token_id"] = int(pad)
        return config

    # -- tensors ----------------------------------------------------------------------------------
    def _find(self, spec: TensorSpec, layer: int | None):
        return self._tensors.get(spec.gguf.format(i=layer))

    def _detect_bitnet(self) -> bool:
        bitnet = bitnet_norms_present(self.cfg, lambda s, i: self._find(s, i) is not None,
                                      lambda s, i: f"{self.path}: BitNet per-projection norms are incomplete: "
                                                   f"tensor {s.gguf.format(i=i)} is missing")
        i2s = [t.name for t in self.reader.tensors if int(t.tensor_type) == I2S_TYPE]
        if i2s and not bitnet:
            raise BitnetOnnxError(f"{self.path}: tensor {i2s[0]} is I2_S but the file has no BitNet "
                                  "per-projection norms (*_norm_in.weight)")
        return bitnet

    def hf_name(self, role: str, layer: int | None = None) -> str:
        """The tensor's name in the file (for messages; the GGUF name)."""
        return self.cfg.tensor_spec(role, layer).gguf.format(i=layer)

    def _stored(self, role: str, layer: int | None):
        spec = self.cfg.tensor_spec(role, layer)
        tensor = self._find(spec, layer)
        if tensor is None:
            raise BitnetOnnxError(f"{self.path}: required tensor {spec.gguf.format(i=layer)} is missing")
        shape, expected = tensor_shape(tensor), self.cfg.shape(spec)
        if shape != expected:
            raise BitnetOnnxError(f"{self.path}: tensor {tensor.name} has shape {shape}, the metadata implies {expected}")
        return spec, tensor

    def tensor(self, role: str, layer: int | None = None) -> np.ndarray:
        """The tensor as float32 in HF form (Gemma norms without their +1); errors name file and tensor."""
        spec, tensor = self._stored(role, layer)
        try:
            w = dequantize(self.reader, tensor)
        except (ValueError, IndexError, OSError) as e:
            raise BitnetOnnxError(f"{self.path}: tensor {tensor.name} cannot be read ({e})") from None
        if spec.kind in (NORM, HEAD_NORM) and self.arch.norm_offset:
            w = w - np.float32(self.arch.norm_offset)  # llama.cpp stores (offset + w)
        if not np.all(np.isfinite(w)):
            raise BitnetOnnxError(f"{self.path}: tensor {tensor.name} has non-finite values (NaN or Inf)")
        return np.ascontiguousarray(w, dtype=np.float32)

    def tensor_f16(self, role: str, layer: int | None = None) -> np.ndarray:
        """The tensor as float16, checked as ``tensor`` checks it and for float16's range."""
        return to_float16(self.tensor(role, layer), self.hf_name(role, layer))

    def ternary_codes(self, role: str, layer: int | None = None) -> tuple[np.ndarray, float] | None:
        """(I2_S packed codes uint8 [N, K/4], scale) of an I2_S projection as stored; None for other types."""
        spec, tensor = self._stored(role, layer)
        if spec.kind != LINEAR or int(tensor.tensor_type) != I2S_TYPE:
            return None
        try:
            packed, scale = read_i2s_packed(self.reader, tensor)
        except ValueError as e:
            raise BitnetOnnxError(f"{self.path}: tensor {tensor.name} cannot be read ({e})") from None
        if not np.isfinite(scale):
            raise BitnetOnnxError(f"{self.path}: tensor {tensor.name} has a non-finite I2_S scale")
        return np.array(packed), scale

    # -- sentence-transformers facts and tokenizer ------------------------------------------------
    def st_modules(self, pooling: str | None = None) -> StModules:
        """Pooling (``pooling`` overrides), normalize, prompts and max length from the metadata."""
        chosen, from_file = self._pooling(pooling)
        names = self.meta.get(PROMPT_NAMES_KEY) or []
        texts = self.meta.get(PROMPTS_KEY) or []
        if len(names) != len(texts):
            raise BitnetOnnxError(f"{self.path}: {PROMPT_NAMES_KEY} and {PROMPTS_KEY} differ in length")
        max_len = self.meta.get(MAX_SEQ_LENGTH_KEY)
        return StModules(pooling=chosen, normalize=bool(self.meta.get(NORMALIZE_KEY, False)),
                         prompts=dict(zip(map(str, names), map(str, texts))),
                         default_prompt_name=self.meta.get(DEFAULT_PROMPT_KEY) or None,
                         max_seq_length=int(max_len) if max_len else None, dimension=self.cfg.hidden,
                         include_prompt=bool(self.meta.get(INCLUDE_PROMPT_KEY, True)), pooling_from_config=from_file)

    def _pooling(self, pooling: str | None) -> tuple[str, bool]:
        code = self._key("pooling_type")
        stored = POOLING_NAMES.get(int(code)) if code is not None else None
        key = f"{self.arch.name}.pooling_type"
        return choose_pooling(stored, pooling, self.arch, str(self.path), stored_as=key,
                              missing=f"no pooling type in the metadata ({key})")

    @property
    def tokenizer_dir(self) -> Path:
        """A private folder holding the rebuilt tokenizer.json and tokenizer_config.json (made once)."""
        if self._tokenizer_tmp is None:
            text, config = tokenizer_files(self.meta, str(self.path), self.arch.append_eos)
            tmp = tempfile.TemporaryDirectory(prefix="bitnet-onnx-gguf-tokenizer-")
            Path(tmp.name, "tokenizer.json").write_text(text, encoding="utf-8")
            Path(tmp.name, "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False),
                                                               encoding="utf-8")
            self._tokenizer_tmp = tmp
        return Path(self._tokenizer_tmp.name)
