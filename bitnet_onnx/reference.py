"""PyTorch reference of an embedding model: what an exported folder must reproduce.

transformers' own model class (``ArchSpec.hf_class``: Qwen3Model, Gemma3TextModel) loaded from the
HF folder, eager attention, with each of the seven projections of a BitNet model replaced by a
``BitLinear`` (docs/architecture.md, "Numerics"), followed by sentence-transformers-style pooling,
Dense modules and normalization. Needs the optional extra (torch, transformers), imported lazily.

Positions are ``cumsum(mask) - 1`` like the exported graph, so a left-padded row equals the same
text alone (HF's default arange positions would shift it).

Modes (``activations``):
- ``"int8"``  full BitLinear: fused RMSNorm, per-token absmax int8 activations, exact integer sums;
              what the i2s and int8 exports compute.
- ``"float"`` fake-quant: RMSNorm, then ``s_w * T`` with float activations; what f32/f16 exports of a
              BitNet model compute.
Standard models run unchanged (plain HF), unless ``ternarize`` (the export's --ternarize stand-in).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
from packaging.version import Version

from bitnet_onnx.arch import LINEAR, PROJECTIONS
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.model_source import ModelSource
from bitnet_onnx.st_modules import L2_NORM_EPS, StModules
from bitnet_onnx.ternary import ACT_EPS, ternarize, unpack_i2s
from bitnet_onnx.weights import open_source

ACTIVATION_MODES = ("int8", "float")
# The texts `verify` compares when given none (and benchmarks/bench_accuracy.py quotes): prose, a question,
# the model's own subject, code and one word.
VERIFY_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "Ternary weights take two bits each; activations are quantized to eight bits per token.",
    "def embed(texts): return model.encode(texts, normalize_embeddings=True)",
    "short",
)


def _torch():
    try:
        import torch
        import transformers
    except ImportError as e:
        raise BitnetOnnxError(f"the PyTorch reference needs torch and transformers "
                              f"(pip install 'bitnet-onnx[reference]'): {e}") from None
    return torch, transformers


def _bitlinear_class():
    torch, _ = _torch()

    class BitLinear(torch.nn.Module):
        """y = (sum_k q_k T_nk) / a * s_w after the projection's own RMSNorm (docs/architecture.md, "Numerics")."""

        def __init__(self, t: np.ndarray, s_w: float, norm_in: np.ndarray | None, eps: float, quantize: bool):
            super().__init__()
            self.register_buffer("t", torch.from_numpy(t.astype(np.float64)))
            self.s_w = float(np.float32(s_w))
            self.register_buffer("norm_in", None if norm_in is None else torch.from_numpy(norm_in.astype(np.float32)))
            self.eps = eps
            self.quantize = quantize

        def forward(self, x):
            x = x.float()
            if self.norm_in is not None:  # as the op: sum of squares in float64, the rest in float32
                ms = x.double().pow(2).mean(-1, keepdim=True)
                x = (x * (1.0 / torch.sqrt(ms + self.eps)).float()) * self.norm_in
            if not self.quantize:
                return (x.double() @ self.t.T).float() * self.s_w
            absmax = x.abs().amax(-1, keepdim=True).clamp_min(ACT_EPS)
            a = torch.tensor(127.0, dtype=torch.float32) / absmax
            q = torch.round(x * a).clamp(-128, 127)  # round half to even, like the op
            sums = (q.double() @ self.t.T).float()  # exact: |sum| < 2^24
            return (sums / a) * torch.tensor(self.s_w, dtype=torch.float32)

    return BitLinear


def _read_only_tensor(torch, array: np.ndarray):
    """``array`` as a torch tensor without a copy (a 262k-token table is 670 MB), for reading only (compared,
    or copied into the model by load_state_dict): a source may hand out arrays it shares and marks
    read-only, which torch wraps with a warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.ascontiguousarray(array))


class Reference:
    def __init__(self, model_dir: str | Path | ModelSource, arch: str | None = None, activations: str = "int8",
                 ternarize: bool = False, f16_embeddings: bool = True, pooling: str | None = None):
        """``model_dir``: a HF folder, or a GGUF file (transformers' own GGUF loader, needs accelerate),
        or that source already opened (``weights.open_source``; ``arch`` is then unused)."""
        if activations not in ACTIVATION_MODES:
            raise BitnetOnnxError(f"activations must be one of {ACTIVATION_MODES}, got {activations!r}")
        torch, transformers = _torch()
        self.f16_embeddings = f16_embeddings
        self.folder: ModelSource = (open_source(model_dir, arch) if isinstance(model_dir, (str, os.PathLike))
                                    else model_dir)
        self.st: StModules = self.folder.st_modules(pooling)
        if not self.folder.cfg.causal and Version(transformers.__version__) < Version("4.57"):
            # older transformers ignore use_bidirectional_attention and silently run causal (ST #3513)
            raise BitnetOnnxError(f"{self.folder.path}: bidirectional attention needs transformers >= 4.57, "
                                  f"found {transformers.__version__}")
        cls = getattr(transformers, self.folder.arch.hf_class)
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # BitNet norms are "unexpected" keys to HF; we load them below
        transformers.logging.disable_progress_bar()
        loaded = {}
        try:
            if self.folder.path.is_file() and self._has_i2s():  # gguf-py cannot dequantize I2_S: our reader gives the weights
                self.model, loaded = self._from_source(cls, transformers, torch)
            else:
                self.model = self._from_pretrained(cls, torch)
        finally:
            transformers.logging.set_verbosity(verbosity)
            transformers.logging.enable_progress_bar()
        self._finish(activations, ternarize, loaded)

    def _from_pretrained(self, cls, torch):
        """transformers' own loading of the folder, or of a GGUF (dequantized by gguf-py)."""
        path = self.folder.path
        try:
            where = {"pretrained_model_name_or_path": str(path)}
            if path.is_file():  # a GGUF file: dequantized by transformers (with gguf-py)
                where = {"pretrained_model_name_or_path": str(path.parent), "gguf_file": path.name}
            return cls.from_pretrained(**where, dtype=torch.float32, attn_implementation="eager")
        except (ValueError, ImportError, OSError, NotImplementedError) as e:
            if not path.is_file():
                raise
            raise BitnetOnnxError(f"{path}: transformers cannot load this GGUF ({str(e).splitlines()[0]})") from None

    def _finish(self, activations: str, ternarize: bool, loaded: dict) -> None:
        torch, _ = _torch()
        self.model.eval()
        if self.f16_embeddings:  # the export stores the table in f16; compare the graph, not that storage choice
            with torch.no_grad():
                table = self.model.get_input_embeddings().weight
                table.copy_(table.half().float())
        if self.folder.is_bitnet or ternarize:
            self._install_bitlinear(activations == "int8", ternarize and not self.folder.is_bitnet)
        self._check_loaded(loaded)

    def _has_i2s(self) -> bool:
        cfg = self.folder.cfg
        return any(self.folder.ternary_codes(p.weight, i) is not None for i in range(cfg.n_layers) for p in PROJECTIONS)

    def _from_source(self, cls, transformers, torch):
        """The HF model built from the source's config, its tensors from our reader (the projections
        follow as BitLinear from their I2_S codes); (the model, the tensors it was given by HF name)."""
        folder = self.folder
        # GGUF stores query_pre_attn_scalar as float32; transformers' strict config wants its int
        values = {k: int(v) if k == "query_pre_attn_scalar" and float(v).is_integer() else v
                  for k, v in folder.config.items()}
        config = transformers.AutoConfig.for_model(**values)
        model = cls._from_config(config, attn_implementation="eager", dtype=torch.float32)
        state = {}
        for spec in folder.arch.tensors:
            if spec.kind in (LINEAR, "norm_in"):
                continue
            for i in range(folder.cfg.n_layers) if spec.per_layer else (None,):
                state[spec.hf.format(i=i)] = _read_only_tensor(torch, folder.tensor(spec.role, i))  # load_state_dict copies
        model.load_state_dict(state, strict=False)
        return model, state

    def _install_bitlinear(self, quantize: bool, unit_norms: bool) -> None:
        BitLinear = _bitlinear_class()
        folder, cfg = self.folder, self.folder.cfg
        for i in range(cfg.n_layers):
            for p in PROJECTIONS:
                module_path = folder.arch.tensor(p.weight).hf.format(i=i).removesuffix(".weight")
                codes = folder.ternary_codes(p.weight, i)  # a GGUF's I2_S as stored, as the export carries them
                t, s_w = (unpack_i2s(codes[0], codes[0].shape[1] * 4), codes[1]) if codes else ternarize(folder.tensor(p.weight, i))
                norm_in = np.ones(t.shape[1], np.float32) if unit_norms else folder.tensor(p.norm_in, i)
                parent, _, leaf = module_path.rpartition(".")
                setattr(self.model.get_submodule(parent), leaf, BitLinear(t, s_w, norm_in, cfg.rms_eps, quantize))

    def _check_loaded(self, loaded: dict) -> None:
        """from_pretrained fills missing tensors with random values and only warns; refuse that.
        ``loaded``: HF name -> the tensor our reader gave the model (``_from_source``), compared as it is
        instead of read and dequantized a second time (a 262k-token GGUF table: seconds)."""
        torch, _ = _torch()
        state = self.model.state_dict()
        for spec in self.folder.arch.tensors:
            if spec.kind == LINEAR or spec.kind == "norm_in":
                continue
            for i in range(self.folder.cfg.n_layers if spec.per_layer else 1):
                name = spec.hf.format(i=i)
                want = loaded.get(name)
                if want is None:
                    want = _read_only_tensor(torch, self.folder.tensor(spec.role, i if spec.per_layer else None))
                if spec.kind == "embedding" and self.f16_embeddings:
                    want = want.half().float()  # as _finish rounded the table (torch's cast: numpy's is ~7x slower)
                if name not in state or not torch.equal(state[name].float(), want):
                    raise BitnetOnnxError(f"reference: transformers did not load {name} from {self.folder.path}")

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(sentence_embedding [B, dim], token_embeddings [B, S, hidden]) as float32 numpy."""
        torch, _ = _torch()
        ids = torch.from_numpy(np.asarray(input_ids, dtype=np.int64))
        mask = torch.from_numpy(np.asarray(attention_mask, dtype=np.int64))
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        with torch.no_grad():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
        tokens = out.last_hidden_state.float().numpy()
        return self.pool(tokens, np.asarray(attention_mask)), tokens

    def pool(self, tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
        st = self.st
        rows = np.arange(tokens.shape[0])
        real = mask.astype(bool)
        if st.pooling == "lasttoken":  # last position whose mask is 1 (any padding side)
            x = tokens[rows, np.where(real.any(1), tokens.shape[1] - 1 - np.argmax(real[:, ::-1], axis=1), 0)]
        elif st.pooling == "cls":  # first position whose mask is 1
            x = tokens[rows, np.argmax(real, axis=1)]
        else:
            m = real[..., None].astype(np.float32)
            x = (tokens * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        for layer in st.dense:
            x = x @ layer.weight.T + (0 if layer.bias is None else layer.bias)
            x = _dense_activation(x, layer.activation)
        if st.normalize:
            x = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), L2_NORM_EPS)
        return x.astype(np.float32)


def _dense_activation(x: np.ndarray, kind: str) -> np.ndarray:
    if kind == "identity":
        return x
    if kind == "tanh":
        return np.tanh(x)
    if kind == "relu":
        return np.maximum(x, 0)
    if kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "gelu":
        torch, _ = _torch()
        return torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    raise BitnetOnnxError(f"unknown Dense activation {kind!r}")
