"""``bitnet_onnx.json``: what an exported folder holds and how to feed it.

Written by the exporter, read by the runtime (Embedder, embed, bench, verify). One dataclass,
so both sides agree on every field.
"""

from __future__ import annotations

import json
import os
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from bitnet_onnx.version import __version__
from bitnet_onnx.customops import DOMAIN as OP_DOMAIN
from bitnet_onnx.customops import DOMAIN_VERSION as OP_DOMAIN_VERSION
from bitnet_onnx.customops.encoder_attention import PRECISIONS as ATTENTION_PRECISIONS
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.formats import MIN_ONNXRUNTIME
from bitnet_onnx.io import read_json_object, resolve
from bitnet_onnx.precision import PRECISIONS
from bitnet_onnx.st_modules import POOLINGS

MANIFEST_NAME = "bitnet_onnx.json"
MODEL_NAME = "model.onnx"
TEXT_MODEL_NAME = "model_text.onnx"  # export --text-input: strings in
# Where an export keeps its weights past 64 MiB (export/writer.py), one file that every graph of the
# folder points into: beside model.onnx, or with ``--layout hf`` moved into the layout's onnx/ folder,
# under the name optimum fetches with onnx/model.onnx (export/hf_layout.py)
EXTERNAL_DATA_NAME = MODEL_NAME + ".data"
HF_ONNX_DIR = "onnx"
HF_MODEL_FILE = f"{HF_ONNX_DIR}/{MODEL_NAME}"
HF_EXTERNAL_DATA_NAME = MODEL_NAME + "_data"  # optimum downloads <file>_data next to a hub model's file
HF_EXTERNAL_DATA_FILE = f"{HF_ONNX_DIR}/{HF_EXTERNAL_DATA_NAME}"
EXTERNAL_DATA_FILES = (EXTERNAL_DATA_NAME, HF_EXTERNAL_DATA_FILE)  # relative to the export folder
TEXT_INPUT, PROMPT_INPUT = "text", "prompt"  # its inputs: string [N], string [1] (optional)
# model.onnx input of include_prompt=false models: int64 [batch], leading tokens left out of the pooling
PROMPT_LENGTH_INPUT = "prompt_length"
# model.onnx's third output: the token embeddings again (after the final norm, float32 [batch, sequence,
# hidden]) under the name optimum's ORTModelForFeatureExtraction reads, so sentence-transformers'
# ONNX backend and optimum load the top-level graph of an ``export --layout hf`` folder as they
# load the layout's onnx/model.onnx (which is this graph cut to this output)
LAST_HIDDEN_STATE = "last_hidden_state"
FORMAT_VERSION = 1
# Activation memory one session run may take (texts x their padded length, by the manifest's cost
# model): the exporter picks an attention strategy that serves max_length for one text within it, and
# the runtime cuts batches to it. 8 GiB leaves a 24 GB, 2-vCPU host room for the weights and a second model.
ACTIVATION_BUDGET_BYTES = 8 << 30


@dataclass
class Manifest:
    arch: str  # ArchSpec.name
    weights: str  # a weight format's name (bitnet_onnx.formats.NAMES)
    pooling: str  # one of POOLINGS
    normalize: bool  # sentence_embedding is L2-normalized in the graph
    dimension: int  # width of sentence_embedding
    hidden_size: int  # width of token_embeddings
    max_length: int  # tokens per text after truncation (EOS included)
    padding_side: str  # "right" or "left": how the runtime pads batches
    pad_token_id: int
    append_eos_token_id: int | None = None  # appended to every text unless already last
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    nbits: int | None = None  # bits of MatMulNBits when weights == "nbits"
    ternarized: bool = False  # post-training ternarization of a standard model (speed stand-in)
    attention: str = "onnx"  # the exporter's attention strategy (export --attention)
    # export --attention-precision: what the fused op was asked to multiply in (f32, bf16, or auto: the op
    # library's choice on the host that runs it); f32 for the other strategies, which are float32 throughout
    attention_precision: str = "f32"
    custom_ops: list[str] = field(default_factory=lambda: ["I2STernaryMatMul"])  # our library's ops in the graph
    needs_custom_ops: bool = True  # custom_ops is not empty: register the op library (hosts read this flag)
    # export --text-input: the strings-in graph (text [N], prompt [1] -> ...); our library's ops in it
    # (tokenizer, NFC) and whether it also needs onnxruntime-extensions' library (its HfJsonTokenizer)
    text_model_file: str | None = None
    text_custom_ops: list[str] = field(default_factory=list)
    text_needs_extensions: bool = False
    # export --output-precision: sentence_embedding's encoding (bitnet_onnx.precision): float32 [batch,
    # dimension], int8 / uint8 [batch, dimension] or binary (int8) / ubinary (uint8) [batch, ceil(dimension / 8)]
    output_precision: str = "float32"
    op_domain: str = OP_DOMAIN
    op_domain_version: int = OP_DOMAIN_VERSION
    min_onnxruntime: str = MIN_ONNXRUNTIME  # the weight format's (formats.WeightFormat.min_onnxruntime)
    package_version: str = __version__
    source_model: str = ""
    # The export's activation cost model (export/memory.py): bytes per token and, for attention that
    # builds [B, H, S, S] tensors (the stock decomposition), per (query, key) pair; None: not recorded
    activation_bytes_per_token: int | None = None
    attention_bytes_per_token_pair: int | None = None
    model_file: str = MODEL_NAME
    format_version: int = FORMAT_VERSION

    def write(self, folder: Path) -> Path:
        path = Path(folder) / MANIFEST_NAME
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, folder: Path) -> "Manifest":
        path = Path(folder) / MANIFEST_NAME
        resolve(folder)  # a symlink loop: one line naming the folder
        if not Path(folder).is_dir():
            raise BitnetOnnxError(f"{folder}: not a folder (expected an exported bitnet-onnx folder)")
        if not os.path.lexists(path):
            raise BitnetOnnxError(f"{path}: manifest missing; is {folder} a folder written by 'bitnet-onnx export'?")
        data = read_json_object(path)
        known = {f.name for f in fields(cls)}
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise BitnetOnnxError(f"{path}: missing field(s) {', '.join(missing)}")
        m = cls(**{k: v for k, v in data.items() if k in known})
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            value = getattr(m, f.name)
            if not _has_type(value, hints[f.name]):
                raise BitnetOnnxError(f"{path}: field {f.name!r} must be {_type_name(hints[f.name])}, got {value!r}")
        if m.format_version > FORMAT_VERSION:
            raise BitnetOnnxError(f"{path}: format_version {m.format_version} is newer than this bitnet-onnx reads")
        if m.pooling not in POOLINGS:
            raise BitnetOnnxError(f"{path}: unknown pooling {m.pooling!r}")
        if m.output_precision not in PRECISIONS:
            raise BitnetOnnxError(f"{path}: output_precision must be one of {', '.join(PRECISIONS)}, "
                                  f"got {m.output_precision!r}")
        if m.attention_precision not in ATTENTION_PRECISIONS:
            raise BitnetOnnxError(f"{path}: attention_precision must be one of {', '.join(ATTENTION_PRECISIONS)}, "
                                  f"got {m.attention_precision!r}")
        if m.padding_side not in ("left", "right"):
            raise BitnetOnnxError(f"{path}: padding_side must be 'left' or 'right', got {m.padding_side!r}")
        for name in ("max_length", "dimension", "hidden_size"):
            value = getattr(m, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BitnetOnnxError(f"{path}: {name} must be a positive integer, got {value!r}")
        return m

    def needs_op_library(self, text: bool = False) -> bool:
        """Whether the folder's model (``text``: its strings-in model, whose tokenizer may be ours) uses
        ops of our library."""
        return self.needs_custom_ops or (text and bool(self.text_custom_ops))

    def batch_bytes(self, texts: int, width: int) -> int | None:
        """Peak activation bytes of one run of ``texts`` texts padded to ``width`` tokens (None: unknown)."""
        if self.activation_bytes_per_token is None or self.attention_bytes_per_token_pair is None:
            return None
        return texts * width * (self.activation_bytes_per_token + width * self.attention_bytes_per_token_pair)


def _has_type(value, hint) -> bool:
    """``value`` as JSON gives it, checked against a field's annotation (bool is not an int here)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_has_type(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_has_type(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_has_type(k, args[0]) and _has_type(v, args[1]) for k, v in value.items())
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")

