"""HF model folder -> weights: the HF-folder model source (``model_source.ModelSource``).

``open_model(path)`` reads config.json (architecture, ModelConfig) and indexes the safetensors
file(s), single or sharded (safetensors_file.py). Tensors are read one at a time from a memory map
and returned as float32 (or as float16, converted chunk by chunk: ``tensor_f16``), checked against the
shape config.json implies and for finiteness, so a 0.6B model is never held whole in RAM. A GGUF file is
the other source (``gguf_source.GgufModel``); ``open_source`` opens either, by what the path is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import NORM_IN, ArchSpec, ModelConfig, TensorSpec, detect_arch
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import to_float16
from bitnet_onnx.gguf_file import is_gguf
from bitnet_onnx.gguf_source import GgufModel
from bitnet_onnx.io import read_json, read_json_object, resolve
from bitnet_onnx.model_source import ModelSource, bitnet_norms_present
from bitnet_onnx.safetensors_file import TensorEntry, entry_chunks, index_safetensors, load_entry
from bitnet_onnx.st_modules import StModules, read_st_modules

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
PREFIX = "model."  # transformers' base-model prefix; sentence-transformers saves without it


@contextlib.contextmanager
def _read_errors(where: str):
    """A stored tensor's bytes that cannot be read (a truncated or unreadable file): one line naming it."""
    try:
        yield
    except (OSError, ValueError) as e:
        if isinstance(e, BitnetOnnxError):
            raise
        raise BitnetOnnxError(f"{where} cannot be read ({e})") from None


def _check_finite(values: np.ndarray, where: str) -> None:
    if not np.all(np.isfinite(values)):
        raise BitnetOnnxError(f"{where} has non-finite values (NaN or Inf)")


class ModelFolder:
    """A HF model folder: config, architecture and tensor-by-tensor float32 access."""

    def __init__(self, path: Path, arch: str | None = None, check_pooling: bool = False, pooling: str | None = None):
        self.path = Path(path)
        resolve(self.path)  # a symlink loop: one line naming the folder
        if not self.path.is_dir():
            raise BitnetOnnxError(f"{self.path}: not a model folder (no such directory)")
        config_file = self.path / CONFIG_NAME
        self.config: dict = read_json(config_file, missing=" (a model folder needs config.json)")
        self.arch: ArchSpec = detect_arch(self.config, arch, source=str(config_file))
        self.cfg: ModelConfig = ModelConfig.from_dict(self.config, self.arch, source=str(config_file))
        if check_pooling:  # --pooling against the folder's modules before any weights file is opened
            self.st_modules(pooling)
        self._entries = self._index()
        self.is_bitnet = self._detect_bitnet()

    def _index(self) -> dict[str, TensorEntry]:
        single, index = self.path / WEIGHTS_NAME, self.path / INDEX_NAME
        if os.path.lexists(single):  # index_safetensors refuses what is not a regular file
            return index_safetensors(single)
        if not index.is_file():
            raise BitnetOnnxError(f"{self.path}: no {WEIGHTS_NAME} or {INDEX_NAME}")
        weight_map = read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise BitnetOnnxError(f"{index}: has no 'weight_map'")
        entries: dict[str, TensorEntry] = {}
        for shard in sorted(set(weight_map.values())):
            found = index_safetensors(self.path / shard)
            entries.update({n: e for n, e in found.items() if weight_map.get(n) == shard})
        missing = sorted(set(weight_map) - set(entries))
        if missing:
            raise BitnetOnnxError(f"{index}: tensor {missing[0]} is not in {weight_map[missing[0]]}")
        return entries

    def _detect_bitnet(self) -> bool:
        return bitnet_norms_present(self.cfg, lambda s, i: self._find(s, i) is not None,
                                    lambda s, i: f"{self._source()}: BitNet per-projection norms are incomplete: "
                                                 f"tensor {s.hf.format(i=i)} is missing")

    def _source(self) -> str:
        return WEIGHTS_NAME if (self.path / WEIGHTS_NAME).is_file() else INDEX_NAME

    def _find(self, spec: TensorSpec, layer: int | None) -> str | None:
        name = spec.hf.format(i=layer)
        for candidate in (name, PREFIX + name):
            if candidate in self._entries:
                return candidate
        return None

    def hf_name(self, role: str, layer: int | None = None) -> str:
        """The tensor's name as stored in the file (with or without the "model." prefix)."""
        spec = self.cfg.tensor_spec(role, layer)
        return self._find(spec, layer) or spec.hf.format(i=layer)

    def _entry(self, role: str, layer: int | None) -> tuple[TensorEntry, str, str]:
        """(where the tensor is, its stored name, "file: tensor name" for messages), shape-checked."""
        spec = self.cfg.tensor_spec(role, layer)
        name = self._find(spec, layer)
        if name is None:
            raise BitnetOnnxError(f"{self._source()}: required tensor {spec.hf.format(i=layer)} is missing")
        entry = self._entries[name]
        where = f"{entry.file.name}: tensor {name}"
        expected = self.cfg.shape(spec)
        if entry.shape != expected:
            raise BitnetOnnxError(f"{where} has shape {entry.shape}, {CONFIG_NAME} implies {expected}")
        return entry, name, where

    def tensor(self, role: str, layer: int | None = None) -> np.ndarray:
        """The tensor as float32, shape- and finiteness-checked; errors name the file and tensor."""
        entry, name, where = self._entry(role, layer)
        with _read_errors(where):
            data = load_entry(entry, name)
        _check_finite(data, where)
        return data

    def tensor_f16(self, role: str, layer: int | None = None) -> np.ndarray:
        """The tensor as float16, checked as ``tensor`` checks it and for float16's range; converted chunk by
        chunk, so no float32 copy of it is ever held (a 262k-token table: 670 MB, whose fresh pages were most of
        its time)."""
        entry, name, where = self._entry(role, layer)
        out = np.empty(entry.shape, np.float16)
        flat = out.reshape(-1)
        with _read_errors(where):
            for start, values in entry_chunks(entry, name):
                _check_finite(values, where)
                to_float16(values, name, out=flat[start:start + values.size])
        return out

    def ternary_codes(self, role: str, layer: int | None = None) -> None:
        """A folder holds latent weights, never ready I2_S codes (GgufModel may)."""
        self.cfg.tensor_spec(role, layer)
        return None

    def st_modules(self, pooling: str | None = None) -> StModules:
        """The sentence-transformers modules; ``pooling`` (--pooling) fills in for a missing Pooling module."""
        return read_st_modules(self.path, self.arch, self.cfg.hidden, pooling)

    @property
    def tokenizer_dir(self) -> Path:
        """Where tokenizer.json and its companions are: the folder itself."""
        return self.path

    def raw_tensor_names(self) -> list[str]:
        return sorted(self._entries)

    def tensors(self) -> Iterator[tuple[TensorSpec, int | None, str, str]]:
        """(spec, layer, gguf_name, hf_name) of every tensor of the model, globals first.

        NORM_IN tensors are included only for BitNet models; hf_name is the stored name.
        """
        specs = self.arch.global_tensors()
        for spec in specs:
            yield spec, None, spec.gguf, self.hf_name(spec.role)
        for i in range(self.cfg.n_layers):
            for spec in self.arch.layer_tensors():
                if spec.kind == NORM_IN and not self.is_bitnet:
                    continue
                yield spec, i, spec.gguf.format(i=i), self.hf_name(spec.role, i)


def open_model(path: str | Path, arch: str | None = None, check_pooling: bool = False,
               pooling: str | None = None) -> ModelFolder:
    """Open a HF model folder; ``arch`` (``--arch``) must agree with config.json's model_type."""
    return ModelFolder(Path(path), arch, check_pooling, pooling)


def open_source(path: str | Path, arch: str | None = None, check_pooling: bool = False,
                pooling: str | None = None) -> ModelSource:
    """A HF model folder or a GGUF file (by suffix or magic): a ModelFolder or a GgufModel.
    ``check_pooling``: ``pooling`` (--pooling) is checked against the source before any weights are read."""
    if not Path(path).is_dir() and is_gguf(path):
        return GgufModel(path, arch, check_pooling, pooling)
    return open_model(path, arch, check_pooling, pooling)
