"""The model-source interface: what the exporter, the GGUF converter and the reference read a model through.

Two implementations: ``weights.ModelFolder`` (a HF folder: config.json, safetensors, the
sentence-transformers modules, the tokenizer files) and ``gguf_source.GgufModel`` (a GGUF file);
``weights.open_source`` opens either by what the path is. A source is opened once per job and the
object is handed down: every later step reads the model through it, never through the path again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from bitnet_onnx.arch import NORM_IN, ArchSpec, ModelConfig, TensorSpec
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.st_modules import StModules


@runtime_checkable
class ModelSource(Protocol):
    path: Path  # the folder or file, for messages and the manifest's source_model
    config: dict  # config.json's keys (a GGUF's metadata mapped onto them)
    arch: ArchSpec
    cfg: ModelConfig
    is_bitnet: bool  # every per-projection norm is present

    def hf_name(self, role: str, layer: int | None = None) -> str:
        """The tensor's name as the source stores it, for messages."""

    def tensor(self, role: str, layer: int | None = None) -> np.ndarray:
        """The tensor as float32 in HF form, shape- and finiteness-checked; errors name the source."""

    def tensor_f16(self, role: str, layer: int | None = None) -> np.ndarray:
        """The tensor as float16 (an error naming it beyond float16's range), as ``tensor`` checks it; a
        source that can converts it without a float32 copy of the whole (the embedding table)."""

    def ternary_codes(self, role: str, layer: int | None = None) -> tuple[np.ndarray, float] | None:
        """(I2_S packed codes uint8 [N, K/4], scale) when the source stores them ready, else None."""

    def st_modules(self, pooling: str | None = None) -> StModules:
        """Pooling, Dense, Normalize, prompts and max length; ``pooling`` (--pooling) fills in or must agree."""

    @property
    def tokenizer_dir(self) -> Path:
        """A folder holding tokenizer.json and tokenizer_config.json."""


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
