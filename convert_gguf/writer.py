"""HF model folder -> GGUF (f32, f16 or i2_s), byte-compatible with bitnet.cpp.

Tensor names come from the architecture descriptions (TensorSpec.gguf). All metadata, the
tokenizer and the tensor table are prepared first; tensor data is then read, converted and
streamed to a temporary file in the target folder one tensor at a time, and the file is renamed
into place only when complete.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import HEAD_NORM, LINEAR, NORM, NORM_IN, SLIDING, TensorSpec
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import atomic_file, open_input_file
from bitnet_onnx.ternary import BLOCK
from bitnet_onnx.gguf_file import (
    DEFAULT_PROMPT_KEY, I2S_FILE_TYPE, INCLUDE_PROMPT_KEY, MAX_SEQ_LENGTH_KEY, NORMALIZE_KEY, POOLING_NAMES,
    PROMPT_NAMES_KEY, PROMPTS_KEY, encode_i2s, i2s_nbytes, register_i2s,
)
from bitnet_onnx.st_modules import StModules
from bitnet_onnx.weights import ModelFolder, open_model

from bitnet_onnx.convert_gguf.tokenizer import add_vocab

log = logging.getLogger(__name__)

OUTTYPES = ("f32", "f16", "i2_s")
FILE_TYPES = {"f32": 0, "f16": 1, "i2_s": I2S_FILE_TYPE}  # general.file_type (llama_ftype)
POOLING_TYPES = {name: value for value, name in POOLING_NAMES.items()}  # gguf.PoolingType MEAN, CLS, LAST
QUERY_PRE_ATTN_SCALAR = "{arch}.attention.query_pre_attn_scalar"  # written by the bitnet.cpp converter


def default_outfile(model_dir: Path, outtype: str) -> Path:
    return Path(model_dir) / f"{Path(model_dir).name}-{outtype}.gguf"


def _storage(kind: str, outtype: str, shape: tuple[int, ...]) -> str:
    """GGUF storage of a tensor: "f32", "f16" or "i2_s".

    1-D tensors (all norms) stay f32 in every outtype, as llama.cpp's own converter writes them:
    upstream llama.cpp cannot add an f16 norm to f32 activations (docs/gguf.md).
    """
    if outtype == "f32" or len(shape) <= 1:
        return "f32"
    if outtype == "i2_s" and kind == LINEAR:
        return "i2_s"
    return "f16"


@dataclass(frozen=True)
class PlannedTensor:
    spec: TensorSpec
    layer: int | None
    name: str  # GGUF name
    shape: tuple[int, ...]  # numpy shape [N, K]; GGUF ne is the reverse
    storage: str

    @property
    def nbytes(self) -> int:
        count = int(np.prod(self.shape))
        return {"f32": 4 * count, "f16": 2 * count}.get(self.storage) or i2s_nbytes(*self.shape)


def plan_tensors(folder: ModelFolder, outtype: str, bitnet_norms: bool = True) -> list[PlannedTensor]:
    plan = []
    for spec, layer, gguf_name, _ in folder.tensors():
        if spec.kind == NORM_IN and not bitnet_norms:
            continue
        shape = folder.cfg.shape(spec)
        storage = _storage(spec.kind, outtype, shape)
        if storage == "i2_s" and shape[-1] % BLOCK:
            raise BitnetOnnxError(f"tensor {gguf_name}: K={shape[-1]} is not a multiple of {BLOCK}, "
                                  "which I2_S needs")
        plan.append(PlannedTensor(spec, layer, gguf_name, shape, storage))
    return plan


def tensor_data(folder: ModelFolder, t: PlannedTensor) -> np.ndarray:
    """The bytes to store for one tensor (float32, float16 or the int8 I2_S record)."""
    if t.storage == "f16":  # never a norm (1-D tensors stay f32: _storage), so never offset
        return folder.tensor_f16(t.spec.role, t.layer)
    w = folder.tensor(t.spec.role, t.layer)
    if t.spec.kind in (NORM, HEAD_NORM) and folder.arch.norm_offset:
        w = w + np.float32(folder.arch.norm_offset)  # llama.cpp's RMSNorm is x/rms * w
    if t.storage == "i2_s":
        return encode_i2s(w)
    return w.astype(np.float32, copy=False)


def add_metadata(writer, folder: ModelFolder, outtype: str, pooling: str) -> None:
    import gguf

    cfg, arch = folder.cfg, folder.arch.name
    writer.add_name(folder.path.resolve().name)
    writer.add_file_type(FILE_TYPES[outtype])
    writer.add_context_length(cfg.max_positions)
    writer.add_embedding_length(cfg.hidden)
    writer.add_feed_forward_length(cfg.ffn)
    writer.add_block_count(cfg.n_layers)
    writer.add_vocab_size(cfg.vocab)
    writer.add_head_count(cfg.n_heads)
    writer.add_head_count_kv(cfg.n_kv_heads)
    # head_dim != hidden / heads for both models: llama.cpp's default would be wrong.
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_eps)
    writer.add_pooling_type(gguf.PoolingType(POOLING_TYPES[pooling]))
    if folder.arch.query_scale_key:
        writer.add_float32(QUERY_PRE_ATTN_SCALAR.format(arch=arch), float(cfg.query_scale ** -2))
        writer.add_float32(gguf.Keys.Attention.SCALE.format(arch=arch), float(cfg.query_scale))
    if SLIDING in cfg.layer_types:
        writer.add_sliding_window(cfg.sliding_window)
        writer.add_sliding_window_pattern([t == SLIDING for t in cfg.layer_types])
        writer.add_rope_freq_base_swa(cfg.rope_local_theta)
    if not cfg.causal:
        writer.add_causal_attention(False)


def is_gguf_file(path: Path) -> bool:
    """A regular file with the GGUF magic: the only kind of existing --outfile convert-gguf replaces
    (a FIFO or device there is not opened: it could block or never end)."""
    try:
        with open_input_file(path) as f:
            return f.read(4) == b"GGUF"
    except BitnetOnnxError:
        return False


def add_st_metadata(writer, st: StModules) -> None:
    """What sentence-transformers adds that llama.cpp has no key for; `export MODEL.gguf` reads it back."""
    writer.add_bool(NORMALIZE_KEY, st.normalize)
    writer.add_bool(INCLUDE_PROMPT_KEY, st.include_prompt)
    if st.prompts:
        writer.add_array(PROMPT_NAMES_KEY, list(st.prompts))
        writer.add_array(PROMPTS_KEY, list(st.prompts.values()))
    if st.default_prompt_name:
        writer.add_string(DEFAULT_PROMPT_KEY, st.default_prompt_name)
    if st.max_seq_length:
        writer.add_uint32(MAX_SEQ_LENGTH_KEY, st.max_seq_length)


def convert(model_dir: str | Path, outfile: str | Path | None = None, outtype: str = "f16",
            arch: str | None = None, pre_tokenizer: str | None = None,
            progress: bool | None = None, bitnet_norms: bool = True) -> Path:
    """Convert a HF model folder to GGUF; returns the written path. Errors leave no output.

    ``bitnet_norms=False`` leaves BitNet's per-projection norms out: a standard model of the same
    shapes, which upstream llama.cpp loads (the bench's llama.cpp variants; not the same numbers).
    """
    import gguf

    if outtype not in OUTTYPES:
        raise BitnetOnnxError(f"--outtype {outtype!r} is not supported; choose one of {', '.join(OUTTYPES)}")
    folder = open_model(model_dir, arch)
    outfile = Path(outfile) if outfile else default_outfile(folder.path, outtype)
    if outfile.is_dir():
        raise BitnetOnnxError(f"--outfile {outfile} is a directory")
    if not outfile.parent.is_dir():
        raise BitnetOnnxError(f"--outfile {outfile}: folder {outfile.parent} does not exist")
    if outfile.exists() and not is_gguf_file(outfile):  # before the slow part; atomic_file checks again
        raise BitnetOnnxError(f"--outfile {outfile} exists and is not a GGUF file; not replacing it")
    if outtype == "i2_s" and not folder.is_bitnet:
        log.warning("%s has no BitNet per-projection norms; ternarizing its weights will not reproduce it",
                    folder.path)
    st = folder.st_modules()
    if st.dense:
        log.warning("%s: the GGUF omits the %d sentence-transformers Dense layer(s); bitnet.cpp has no place for them",
                    folder.path, len(st.dense))
    plan = plan_tensors(folder, outtype, bitnet_norms)
    _warn_unused(folder)
    i2s = register_i2s()
    log.info("%s: %s, %d layers%s -> %s %s, %d tensors", folder.path, folder.arch.name, folder.cfg.n_layers,
             " (BitNet)" if folder.is_bitnet else "", outfile, outtype, len(plan))

    with atomic_file(outfile, what="--outfile", ours=is_gguf_file) as tmp:
        writer = gguf.GGUFWriter(tmp, folder.arch.name)
        try:
            add_metadata(writer, folder, outtype, st.pooling)
            add_st_metadata(writer, st)
            add_vocab(writer, folder.path, folder.arch, folder.cfg.vocab, pre_tokenizer)
            for t in plan:
                dtype = {"f32": np.float32, "f16": np.float16, "i2_s": np.int8}[t.storage]
                writer.add_tensor_info(t.name, t.shape, np.dtype(dtype), t.nbytes,
                                       raw_dtype=i2s if t.storage == "i2_s" else None)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            for t in _progress(plan, progress):
                writer.write_tensor_data(tensor_data(folder, t))
        finally:
            writer.close()
    return outfile


def _warn_unused(folder: ModelFolder) -> None:
    """Stored tensors the architecture does not describe are left out, with a warning (lm_head silently)."""
    used = {hf for *_, hf in folder.tensors()}
    unused = [n for n in folder.raw_tensor_names() if n not in used and not n.endswith("lm_head.weight")]
    if unused:
        log.warning("%s: %d stored tensor(s) are not part of %s and are left out: %s", folder.path, len(unused),
                    folder.arch.name, ", ".join(unused[:5]) + (", ..." if len(unused) > 5 else ""))


def _progress(plan: list[PlannedTensor], enabled: bool | None) -> Iterable[PlannedTensor]:
    from tqdm import tqdm

    # disable=None: a bar on terminals only
    return tqdm(plan, desc="convert-gguf", unit="tensor", disable=None if enabled is None else not enabled)
