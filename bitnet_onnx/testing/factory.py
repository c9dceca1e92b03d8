"""Test-model factory: writes HF model folders (BitNet or standard) that transformers loads.

``make_model(path, arch)`` writes config.json (transformers-5 or -4 style), safetensors weights
named as sentence-transformers saves the inner model (no "model." prefix), a small tokenizer
trained by the ``tokenizers`` library on ``corpus.CORPUS``, and the sentence-transformers files
(modules.json, Pooling, optional Dense, Normalize, prompts, max length). What differs between
architectures comes from their testing records (``archs.TESTING_ARCHS``: config facts, tiny shape,
rope bases, prompts, tokenizer) and ``arch.REAL_SHAPES`` (the released models' dims). Deterministic for a
seed; seconds for the tiny shapes; real shapes (e.g. Qwen3-0.6B) are written tensor by tensor
in shards so memory stays well under 2 GB.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import ARCHITECTURES, EMBEDDING, FULL, LINEAR, NORM_IN, REAL_SHAPES, SLIDING, ArchSpec, ModelConfig
from bitnet_onnx.st_modules import POOLING_FLAGS, UNSUPPORTED_POOLING_FLAGS
from bitnet_onnx.testing.archs import TESTING_ARCHS
from bitnet_onnx.testing.corpus import CORPUS

__all__ = ["CORPUS", "SHAPES", "make_model"]  # CORPUS: the tokenizers' text, also read by tests from here


def _named_shapes() -> dict[str, dict[str, dict]]:
    """Each architecture's "tiny" shape (its testing record) and its released model's (arch.REAL_SHAPES)."""
    shapes = {name: {"tiny": record.tiny_shape} for name, record in TESTING_ARCHS.items()}
    for name, real in REAL_SHAPES.items():
        shapes.setdefault(name, {})[real.name] = real.config
    return shapes


# Config keys of each named shape, by architecture. "sliding_window_pattern": every n-th layer is full attention.
SHAPES: dict[str, dict[str, dict]] = _named_shapes()
_MAX_SEQ = {"tiny": 256}
_SHARD_BYTES = 256 << 20  # weights per safetensors shard; bounds the factory's peak memory
_CHUNK = 1 << 22  # values generated at a time


def _token_ids(tok, arch: str, source: str) -> dict[str, int]:
    """config.json's token ids (the record's token texts looked up in ``tok``)."""
    wanted = TESTING_ARCHS[arch].config_token_ids
    ids = {key: tok.token_to_id(text) for key, text in wanted.items()}
    missing = [text for key, text in wanted.items() if ids[key] is None]
    if missing:
        raise ValueError(f"{source}: no token {missing[0]!r}, which {arch} needs")
    return ids


def _trained_tokenizer(arch: str):
    """The record's small tokenizer, trained here, with its tokenizer_config.json and config.json ids."""
    tok, config = TESTING_ARCHS[arch].tiny_tokenizer()
    return tok, config, _token_ids(tok, arch, f"{arch} trained tokenizer")


def _folder_tokenizer(folder: Path, arch: str):
    """tokenizer.json + tokenizer_config.json of an existing folder (e.g. a real tokenizer)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    config = json.loads((Path(folder) / "tokenizer_config.json").read_text(encoding="utf-8"))
    return tok, config, _token_ids(tok, arch, f"{folder}/tokenizer.json")


def _config(arch: ArchSpec, dims: dict, style: str, dtype: str, bidirectional: bool, token_ids: dict) -> dict:
    dims = dict(dims)
    pattern = dims.pop("sliding_window_pattern", None)
    n_layers = dims["num_hidden_layers"]
    record = TESTING_ARCHS[arch.name]
    config = {**record.config_base, **dims, **token_ids}
    rope = record.rope
    if style == "v5":
        types = [SLIDING if pattern and (i + 1) % pattern else FULL for i in range(n_layers)]
        config["layer_types"] = types
        if SLIDING in rope:
            config["rope_parameters"] = {t: {"rope_type": "default", "rope_theta": theta} for t, theta in rope.items()}
        else:
            config["rope_parameters"] = {"rope_type": "default", "rope_theta": rope[FULL]}
        config["dtype"] = dtype
        config["transformers_version"] = "5.0.0"
    elif style == "v4":
        config["rope_theta"] = rope[FULL]
        if SLIDING in rope:
            config["rope_local_base_freq"] = rope[SLIDING]
        if pattern:
            config["sliding_window_pattern"] = pattern
        config["rope_scaling"] = None
        config["torch_dtype"] = dtype
        config["transformers_version"] = "4.53.0"
    else:
        raise ValueError(f"config_style must be 'v5' or 'v4', got {style!r}")
    if bidirectional:
        config["use_bidirectional_attention"] = True
    return dict(sorted(config.items()))


def _to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (round to nearest even)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def _generate(rng: np.random.Generator, shape: tuple[int, ...], mean: float, std: float, bf16: bool) -> np.ndarray:
    """mean + std * N(0, 1) in chunks, stored as bf16 bits or float32."""
    out = np.empty(shape, dtype=np.uint16 if bf16 else np.float32)
    flat = out.reshape(-1)
    for start in range(0, flat.size, _CHUNK):
        n = min(_CHUNK, flat.size - start)
        x = rng.standard_normal(n, dtype=np.float32)
        x *= np.float32(std)
        x += np.float32(mean)
        flat[start:start + n] = _to_bf16(x) if bf16 else x
    return out


def _weights(cfg: ModelConfig, bitnet: bool, rng: np.random.Generator, bf16: bool) -> Iterator[tuple[str, np.ndarray]]:
    arch = cfg.arch
    own_norm_mean = 1.0 - arch.norm_offset  # Gemma stores w of (1 + w)
    stats = {EMBEDDING: (0.0, 0.1), LINEAR: (0.0, 0.02), NORM_IN: (1.0, 0.1)}
    for spec in arch.global_tensors():
        yield spec.hf, _generate(rng, cfg.shape(spec), *stats.get(spec.kind, (own_norm_mean, 0.1)), bf16)
    for i in range(cfg.n_layers):
        for spec in arch.layer_tensors():
            if spec.kind == NORM_IN and not bitnet:
                continue
            yield spec.hf.format(i=i), _generate(rng, cfg.shape(spec), *stats.get(spec.kind, (own_norm_mean, 0.1)), bf16)


def _save_safetensors(tensors: dict[str, np.ndarray], file: Path, bf16: bool) -> None:
    import safetensors

    dtype = "bfloat16" if bf16 else "float32"
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8
        specs = {n: safetensors.TensorSpec(dtype=dtype, shape=list(a.shape), data_ptr=a.ctypes.data,
                                           data_len=a.nbytes) for n, a in tensors.items()}
    else:
        specs = {n: {"dtype": dtype, "shape": list(a.shape), "data": a.tobytes()} for n, a in tensors.items()}
    safetensors.serialize_file(specs, str(file), metadata={"format": "pt"})


def _write_weights(path: Path, tensors: Iterator[tuple[str, np.ndarray]], bf16: bool) -> None:
    """One model.safetensors, or shards plus model.safetensors.index.json when large."""
    shards: list[tuple[Path, list[str]]] = []
    pending: dict[str, np.ndarray] = {}
    total = 0

    def flush():
        file = path / f"shard-{len(shards):05d}.tmp"
        _save_safetensors(pending, file, bf16)
        shards.append((file, list(pending)))
        pending.clear()

    for name, array in tensors:
        if pending and sum(a.nbytes for a in pending.values()) + array.nbytes > _SHARD_BYTES:
            flush()
        pending[name] = array
        total += array.nbytes
    flush()
    if len(shards) == 1:
        os.replace(shards[0][0], path / "model.safetensors")
        return
    weight_map = {}
    for k, (file, names) in enumerate(shards):
        final = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        os.replace(file, path / final)
        weight_map.update({n: final for n in names})
    _write_json(path / "model.safetensors.index.json", {"metadata": {"total_size": total}, "weight_map": weight_map})


def _write_json(file: Path, data) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_st_files(path: Path, hidden: int, pooling: str, normalize: bool, dense: bool, dense_width: int | None,
                    prompts: dict, max_seq: int, rng: np.random.Generator) -> None:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    flags = {flag: POOLING_FLAGS[pooling] == flag for flag in (*POOLING_FLAGS.values(), *UNSUPPORTED_POOLING_FLAGS)}
    _write_json(path / "1_Pooling" / "config.json", {"word_embedding_dimension": hidden, **flags, "include_prompt": True})
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
    if dense:  # like EmbeddingGemma: widen, then project to a width unlike hidden
        import safetensors.numpy

        widths = [hidden, 2 * hidden, dense_width or (3 * hidden) // 4]
        for k, (d_in, d_out) in enumerate(zip(widths, widths[1:])):
            folder = f"{len(modules)}_Dense"
            bias = k == 1
            _write_json(path / folder / "config.json", {"in_features": d_in, "out_features": d_out, "bias": bias,
                                                         "activation_function": "torch.nn.modules.linear.Identity"})
            tensors = {"linear.weight": (rng.standard_normal((d_out, d_in), dtype=np.float32) / np.sqrt(d_in)).astype(np.float32)}
            if bias:
                tensors["linear.bias"] = (0.01 * rng.standard_normal(d_out, dtype=np.float32)).astype(np.float32)
            safetensors.numpy.save_file(tensors, str(path / folder / "model.safetensors"))
            modules.append({"idx": len(modules), "name": str(len(modules)), "path": folder,
                            "type": "sentence_transformers.models.Dense"})
    if normalize:
        modules.append({"idx": len(modules), "name": str(len(modules)), "path": f"{len(modules)}_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
        (path / f"{len(modules) - 1}_Normalize").mkdir(exist_ok=True)
    _write_json(path / "modules.json", modules)
    _write_json(path / "config_sentence_transformers.json",
                {"__version__": {"sentence_transformers": "5.0.0"}, "prompts": prompts,
                 "default_prompt_name": None, "similarity_fn_name": "cosine", "model_type": "SentenceTransformer"})
    _write_json(path / "sentence_bert_config.json", {"max_seq_length": max_seq, "do_lower_case": False})


def model_config(arch: str, dims: dict, style: str = "v5", bidirectional: bool = False) -> ModelConfig:
    """The ModelConfig of the config.json make_model writes for ``dims`` (a SHAPES entry or the like; bfloat16,
    ``style`` "v5" or "v4" as transformers 5 / 4 write it), without building a model: for shapes too large to build."""
    spec = ARCHITECTURES[arch]
    return ModelConfig.from_dict(_config(spec, dims, style, "bfloat16", bidirectional, {}), spec)


def make_model(
    path: str | Path,
    arch: str = "qwen3",
    bitnet: bool = True,
    seed: int = 0,
    *,
    shape: str | dict = "tiny",
    pooling: str | None = None,
    normalize: bool = True,
    dense: bool = False,
    dense_width: int | None = None,
    bidirectional: bool = False,
    layers: int | None = None,
    sliding_window: int | None = None,
    sliding_window_pattern: int | None = None,
    prompts: dict[str, str] | None = None,
    config_style: str = "v5",
    dtype: str = "bfloat16",
    padding_side: str | None = None,
    tokenizer: str | Path | None = None,
) -> Path:
    """Write a HF model folder at ``path`` (created, must be empty or absent) and return it.

    ``shape`` names an entry of SHAPES[arch] or is a dict of config keys laid over "tiny".
    ``pooling`` defaults to lasttoken (Qwen3) / mean (Gemma3). ``bitnet`` adds the seven
    per-projection norms per layer. ``dense`` adds two sentence-transformers Dense layers, the second
    one's out_features ``dense_width`` (default 3/4 of hidden; the embedding's width).
    ``tokenizer``: a folder whose tokenizer.json + tokenizer_config.json are used instead of the
    trained one; vocab_size grows to cover its ids.
    """
    if dense_width is not None and not dense:
        raise ValueError("dense_width sets the Dense layers' output width: it needs dense=True")
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {sorted(ARCHITECTURES)}, got {arch!r}")
    if arch not in TESTING_ARCHS:
        raise ValueError(f"arch {arch!r} has no testing record in bitnet_onnx/testing/archs.py")
    spec = ARCHITECTURES[arch]
    if isinstance(shape, str):
        if shape not in SHAPES[arch]:
            raise ValueError(f"shape {shape!r} is not one of {sorted(SHAPES[arch])} for {arch}")
        dims = dict(SHAPES[arch][shape])
    else:
        dims = {**SHAPES[arch]["tiny"], **shape}
    if layers is not None:
        dims["num_hidden_layers"] = layers
    if sliding_window is not None:
        dims["sliding_window"] = sliding_window
    if sliding_window_pattern is not None:  # every n-th layer full: a few-layer real shape keeps one
        dims["sliding_window_pattern"] = sliding_window_pattern
    if dtype not in ("bfloat16", "float32"):
        raise ValueError(f"dtype must be 'bfloat16' or 'float32', got {dtype!r}")
    pooling = pooling or ARCHITECTURES[arch].default_pooling or "mean"  # Gemma3 has none; EmbeddingGemma's
    if pooling not in POOLING_FLAGS:
        raise ValueError(f"pooling must be one of {sorted(POOLING_FLAGS)}, got {pooling!r}")

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if any(path.iterdir()):
        raise ValueError(f"{path} is not empty")
    try:
        tok, tok_config, token_ids = _folder_tokenizer(tokenizer, arch) if tokenizer else _trained_tokenizer(arch)
        if tokenizer:
            dims["vocab_size"] = max(dims["vocab_size"], tok.get_vocab_size())
        max_seq = _MAX_SEQ.get(shape if isinstance(shape, str) else "tiny", dims["max_position_embeddings"])
        tok_config["model_max_length"] = max_seq
        if padding_side is not None:
            tok_config["padding_side"] = padding_side
        if tokenizer:  # the file as given, not a re-serialization
            shutil.copyfile(Path(tokenizer) / "tokenizer.json", path / "tokenizer.json")
        else:
            tok.save(str(path / "tokenizer.json"))
        _write_json(path / "tokenizer_config.json", tok_config)

        config = _config(spec, dims, config_style, dtype, bidirectional, token_ids)
        _write_json(path / "config.json", config)
        cfg = ModelConfig.from_dict(config, spec)
        if tok.get_vocab_size() > cfg.vocab:
            raise ValueError(f"tokenizer has {tok.get_vocab_size()} tokens, more than vocab_size {cfg.vocab}")

        rng = np.random.default_rng(seed)
        _write_weights(path, _weights(cfg, bitnet, rng, dtype == "bfloat16"), dtype == "bfloat16")
        _write_st_files(path, cfg.hidden, pooling, normalize, dense, dense_width,
                        TESTING_ARCHS[arch].prompts if prompts is None else prompts, max_seq, rng)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path
