"""HF model folder -> weights: the one loader used by the exporter, the GGUF converter and the reference.

A GGUF file is the other source format (``gguf_source.GgufModel``, same interface: arch, cfg,
is_bitnet, tensor, ternary_codes, st_modules, tokenizer_dir); ``open_source`` picks by file.

``open_model(path)`` reads config.json (architecture, ModelConfig) and indexes the safetensors
file(s), single or sharded. Tensors are read one at a time from a memory map and returned as
float32, checked against the shape config.json implies and for finiteness, so a 0.6B model is
never held whole in RAM.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import NORM_IN, ArchSpec, ModelConfig, TensorSpec, detect_arch
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.gguf_file import is_gguf

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
PREFIX = "model."  # transformers' base-model prefix; sentence-transformers saves without it

# safetensors dtype -> (numpy storage dtype, is bfloat16)
_DTYPES = {"F32": (np.float32, False), "F16": (np.float16, False), "BF16": (np.uint16, True)}
FLOAT16_MAX = float(np.finfo(np.float16).max)


@dataclass(frozen=True)
class _Entry:
    file: Path
    dtype: str  # safetensors dtype string, e.g. "BF16"
    shape: tuple[int, ...]
    offset: int  # absolute byte offset of the data in the file


def read_json(path: Path, what: str = "") -> dict | list:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BitnetOnnxError(f"{path}: file not found{what}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BitnetOnnxError(f"{path}: not valid JSON ({e})") from None


def read_json_object(path: Path, what: str = "") -> dict:
    """read_json of a file that must hold a JSON object (config files); a one-line error otherwise."""
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise BitnetOnnxError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def index_safetensors(file: Path) -> dict[str, _Entry]:
    """Name -> location of every tensor in one safetensors file, validated with the safetensors library.

    safetensors' numpy framework cannot return bf16, so the data is memory-mapped by offset; the
    library still checks the header and that the file is not truncated.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with open(file, "rb"):  # an unreadable file is reported as such, not as a bad format
            pass
        with safe_open(str(file), framework="np") as f:
            names = set(f.keys())
    except FileNotFoundError:
        raise BitnetOnnxError(f"{file}: file not found") from None
    except (SafetensorError, ValueError) as e:
        raise BitnetOnnxError(f"{file}: not a valid safetensors file ({e})") from None
    except OSError as e:
        raise BitnetOnnxError(f"{file}: cannot be read ({e.strerror or e})") from None
    with open(file, "rb") as fh:
        (header_len,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(header_len))
    base = 8 + header_len
    entries = {}
    for name in names:
        h = header[name]
        start, _ = h["data_offsets"]
        entries[name] = _Entry(file, h["dtype"], tuple(int(d) for d in h["shape"]), base + int(start))
    return entries


def bitnet_norms_present(cfg: ModelConfig, found: Callable[[TensorSpec, int | None], bool],
                         incomplete: Callable[[TensorSpec, int | None], str]) -> bool:
    """Whether a source is BitNet: every per-projection norm present (True) or none (False); some but
    not all is an error, worded by ``incomplete`` for the first missing one. Both sources use it."""
    wanted = [(s, i) for s in cfg.arch.tensors if s.kind == NORM_IN
              for i in (range(cfg.n_layers) if s.per_layer else (None,))]
    present = [found(s, i) for s, i in wanted]
    if any(present) and not all(present):
        raise BitnetOnnxError(incomplete(*wanted[present.index(False)]))
    return bool(present) and all(present)


def to_float16(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` as float16; an error naming the tensor when a value is beyond float16's range
    (it would become Inf, and the model's output NaN)."""
    peak = float(np.max(np.abs(values), initial=0.0))
    if peak > FLOAT16_MAX:
        raise BitnetOnnxError(f"tensor {name}: value {peak:g} is beyond float16's range (max {FLOAT16_MAX:g}), "
                              "which this output stores it in")
    return values.astype(np.float16)


def load_entry(entry: _Entry, name: str) -> np.ndarray:
    """One tensor as float32 (bf16 widened by a 16-bit shift); the source is memory-mapped."""
    if entry.dtype not in _DTYPES:
        raise BitnetOnnxError(f"{entry.file.name}: tensor {name} has dtype {entry.dtype}; "
                              f"supported: {', '.join(_DTYPES)}")
    storage, is_bf16 = _DTYPES[entry.dtype]
    count = int(np.prod(entry.shape, dtype=np.int64))
    if count == 0:
        return np.zeros(entry.shape, dtype=np.float32)
    raw = np.memmap(entry.file, dtype=storage, mode="r", offset=entry.offset, shape=entry.shape)
    if is_bf16:  # widen in place: one f32-sized buffer, never two
        wide = raw.astype(np.uint32)
        wide <<= 16
        return wide.view(np.float32)
    return np.array(raw, dtype=np.float32)


class ModelFolder:
    """A HF model folder: config, architecture and tensor-by-tensor float32 access."""

    def __init__(self, path: Path, arch: str | None = None):
        self.path = Path(path)
        if not self.path.is_dir():
            raise BitnetOnnxError(f"{self.path}: not a model folder (no such directory)")
        config_file = self.path / CONFIG_NAME
        self.config: dict = read_json(config_file, " (a model folder needs config.json)")
        self.arch: ArchSpec = detect_arch(self.config, arch, source=str(config_file))
        self.cfg: ModelConfig = ModelConfig.from_dict(self.config, self.arch, source=str(config_file))
        self._entries = self._index()
        self.is_bitnet = self._detect_bitnet()

    def _index(self) -> dict[str, _Entry]:
        single, index = self.path / WEIGHTS_NAME, self.path / INDEX_NAME
        if single.is_file():
            return index_safetensors(single)
        if not index.is_file():
            raise BitnetOnnxError(f"{self.path}: no {WEIGHTS_NAME} or {INDEX_NAME}")
        weight_map = read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise BitnetOnnxError(f"{index}: has no 'weight_map'")
        entries: dict[str, _Entry] = {}
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

    def has(self, role: str, layer: int | None = None) -> bool:
        return self._find(self.cfg.tensor_spec(role, layer), layer) is not None

    def hf_name(self, role: str, layer: int | None = None) -> str:
        """The tensor's name as stored in the file (with or without the "model." prefix)."""
        spec = self.cfg.tensor_spec(role, layer)
        return self._find(spec, layer) or spec.hf.format(i=layer)

    def tensor(self, role: str, layer: int | None = None) -> np.ndarray:
        """The tensor as float32, shape- and finiteness-checked; errors name the file and tensor."""
        spec = self.cfg.tensor_spec(role, layer)
        name = self._find(spec, layer)
        if name is None:
            raise BitnetOnnxError(f"{self._source()}: required tensor {spec.hf.format(i=layer)} is missing")
        entry = self._entries[name]
        where = f"{entry.file.name}: tensor {name}"
        expected = self.cfg.shape(spec)
        if entry.shape != expected:
            raise BitnetOnnxError(f"{where} has shape {entry.shape}, {CONFIG_NAME} implies {expected}")
        try:
            data = load_entry(entry, name)
        except (OSError, ValueError) as e:
            if isinstance(e, BitnetOnnxError):
                raise
            raise BitnetOnnxError(f"{where} cannot be read ({e})") from None
        if not np.all(np.isfinite(data)):
            raise BitnetOnnxError(f"{where} has non-finite values (NaN or Inf)")
        return data

    def ternary_codes(self, role: str, layer: int | None = None) -> None:
        """A folder holds latent weights, never ready I2_S codes (GgufModel may)."""
        self.cfg.tensor_spec(role, layer)
        return None

    def st_modules(self, pooling: str | None = None):
        """The sentence-transformers modules; ``pooling`` (--pooling) fills in for a missing Pooling module."""
        from bitnet_onnx.st_modules import read_st_modules  # st_modules imports this module

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


def open_model(path: str | Path, arch: str | None = None) -> ModelFolder:
    """Open a HF model folder; ``arch`` (``--arch``) must agree with config.json's model_type."""
    return ModelFolder(Path(path), arch)


def open_source(path: str | Path, arch: str | None = None):
    """A HF model folder or a GGUF file (by suffix or magic): a ModelFolder or a GgufModel."""
    if not Path(path).is_dir() and is_gguf(path):
        from bitnet_onnx.gguf_source import GgufModel  # gguf_source imports st_modules, which imports this module

        return GgufModel(path, arch)
    return open_model(path, arch)
