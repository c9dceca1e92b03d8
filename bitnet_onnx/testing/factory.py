"""Test-model factory: writes HF model folders (BitNet or standard) that transformers loads.

``make_model(path, arch)`` writes config.json (transformers-5 or -4 style), safetensors weights
named as sentence-transformers saves the inner model (no "model." prefix), a small tokenizer
trained by the ``tokenizers`` library on a built-in corpus, and the sentence-transformers files
(modules.json, Pooling, optional Dense, Normalize, prompts, max length). Deterministic for a
seed; seconds for the tiny shapes; real shapes (e.g. Qwen3-0.6B) are written tensor by tensor
in shards so memory stays well under 2 GB.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bitnet_onnx.arch import ARCHITECTURES, EMBEDDING, FULL, LINEAR, NORM_IN, SLIDING, ArchSpec, ModelConfig
from bitnet_onnx.st_modules import POOLING_FLAGS, UNSUPPORTED_POOLING_FLAGS

# Config keys of each named shape. "sliding_window_pattern": every n-th layer is full attention.
SHAPES: dict[str, dict[str, dict]] = {
    "qwen3": {
        # q_dim 256 != hidden 128, GQA 4/2: catches q_dim/hidden and kv-head mix-ups.
        "tiny": dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                     intermediate_size=256, num_hidden_layers=2, vocab_size=512, max_position_embeddings=512),
        "qwen3-0.6b": dict(hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                           intermediate_size=3072, num_hidden_layers=28, vocab_size=151936,
                           max_position_embeddings=32768),
    },
    "gemma3": {
        # query_pre_attn_scalar 96 != head_dim, window 8, layers [sliding, sliding, full].
        "tiny": dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                     query_pre_attn_scalar=96, intermediate_size=256, num_hidden_layers=3, vocab_size=512,
                     sliding_window=8, sliding_window_pattern=3, max_position_embeddings=512),
        "gemma3-270m": dict(hidden_size=640, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                            query_pre_attn_scalar=256, intermediate_size=2048, num_hidden_layers=18,
                            vocab_size=262144, sliding_window=512, sliding_window_pattern=6,
                            max_position_embeddings=32768),
    },
}

# Per-architecture config.json facts beyond the shape (HF's own field names and values).
_CONFIG_BASE: dict[str, dict] = {
    "qwen3": {"architectures": ["Qwen3Model"], "model_type": "qwen3", "hidden_act": "silu",
              "attention_bias": False, "attention_dropout": 0.0, "rms_norm_eps": 1e-6,
              "tie_word_embeddings": True, "use_cache": True, "use_sliding_window": False,
              "sliding_window": None, "initializer_range": 0.02},
    "gemma3": {"architectures": ["Gemma3TextModel"], "model_type": "gemma3_text",
               "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False, "attention_dropout": 0.0,
               "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "use_cache": True,
               "final_logit_softcapping": None, "attn_logit_softcapping": None, "initializer_range": 0.02},
}
_ROPE = {"qwen3": {FULL: 1_000_000.0}, "gemma3": {FULL: 1_000_000.0, SLIDING: 10_000.0}}
_DEFAULT_PROMPTS = {  # in the style of Qwen3-Embedding and EmbeddingGemma
    "qwen3": {"query": "Instruct: Given a web search query, retrieve relevant passages\nQuery:", "document": ""},
    "gemma3": {"query": "task: search result | query: ", "document": "title: none | text: "},
}
_MAX_SEQ = {"tiny": 256}
_SHARD_BYTES = 256 << 20  # weights per safetensors shard; bounds the factory's peak memory
_CHUNK = 1 << 22  # values generated at a time

CORPUS = """\
The quick brown fox jumps over the lazy dog. A sentence embedding maps text to a vector.
Ternary weights take the values minus one, zero and plus one; activations are eight-bit integers.
BitNet models replace every linear layer with a BitLinear layer that normalizes its input first.
Search queries and documents are embedded into the same space and compared by cosine similarity.
Onnxruntime runs the exported graph on the CPU with a custom operator for the ternary matmul.
What is the capital of France? Paris is the capital and largest city of France.
How many legs does a spider have? Spiders have eight legs and most have eight eyes.
The weather today is sunny with a light breeze from the west, 21 degrees at noon.
Numbers like 3.14159, 2026, 42 and 1e-6 appear in technical text, as do names like Qwen3 and Gemma3.
def embed(texts): return model.encode(texts, normalize_embeddings=True)  # Python code
Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ?
Der schnelle braune Fuchs springt über den faulen Hund. Grüße aus München!
El rápido zorro marrón salta sobre el perro perezoso. ¿Dónde está la estación?
敏捷的棕色狐狸跳过了懒狗。 今日はいい天気ですね。 빠른 갈색 여우가 게으른 개를 뛰어넘는다.
Emoji and symbols: 🙂 🚀 ✓ → € £ ¥ — “quotes” and ‘apostrophes’ don't break tokenizers.
Retrieval, reranking, clustering and classification are common uses of text embeddings.
Tabs\tand  double  spaces,\nnew lines and trailing spaces   are part of real inputs.
"""

# Qwen2/Qwen3 pre-tokenizer split (digits one at a time).
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _corpus() -> list[str]:
    return [line for line in CORPUS.splitlines() if line] * 4


def _added(tokens: list[tuple[int, str, bool]]) -> dict:
    return {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": special} for i, t, special in tokens}


def _qwen_tokenizer():
    """Byte-level BPE like Qwen3: specials after the BPE vocab, pad = <|endoftext|>."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=440, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(_corpus(), trainer)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")])
    added = [(tok.token_to_id(t), t, t in specials) for t in (*specials, "<think>", "</think>")]
    config = {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": _added(added),
              "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
              "errors": "replace", "pad_token": "<|endoftext|>", "split_special_tokens": False,
              "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    ids = {"bos_token_id": tok.token_to_id("<|endoftext|>"), "eos_token_id": tok.token_to_id("<|endoftext|>")}
    return tok, config, ids


_GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]


def _gemma_tokenizer():
    """SentencePiece-style BPE like Gemma3: ▁ for spaces, byte fallback <0xNN>, <bos> ... <eos>."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    # The trainer breaks ties between equally frequent characters at random: pick the alphabet here.
    counts = Counter(ch for line in _corpus() for ch in line.replace(" ", "▁"))
    alphabet = [ch for ch, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:90]]
    trainer = trainers.BpeTrainer(vocab_size=200, min_frequency=2, initial_alphabet=alphabet,
                                  limit_alphabet=len(alphabet), show_progress=False, special_tokens=[])
    trainer_tok.train_from_iterator(_corpus(), trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab = {t: i for i, t in enumerate(_GEMMA_SPECIALS + [f"<0x{b:02X}>" for b in range(256)])}
    for token, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in trained["merges"]]

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in _GEMMA_SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
        special_tokens=[("<bos>", vocab["<bos>"]), ("<eos>", vocab["<eos>"])])
    added = [(vocab[t], t, True) for t in _GEMMA_SPECIALS]
    config = {"add_bos_token": True, "add_eos_token": True, "added_tokens_decoder": _added(added),
              "bos_token": "<bos>", "clean_up_tokenization_spaces": False, "eos_token": "<eos>",
              "mask_token": "<mask>", "pad_token": "<pad>", "unk_token": "<unk>",
              "spaces_between_special_tokens": False, "tokenizer_class": "GemmaTokenizer"}
    ids = {"pad_token_id": vocab["<pad>"], "eos_token_id": vocab["<eos>"], "bos_token_id": vocab["<bos>"]}
    return tok, config, ids


_TOKENIZERS = {"qwen3": _qwen_tokenizer, "gemma3": _gemma_tokenizer}
# config.json token ids, by token text (the same rule for a given tokenizer folder as for the trained ones).
_CONFIG_TOKEN_IDS = {"qwen3": {"bos_token_id": "<|endoftext|>", "eos_token_id": "<|endoftext|>"},
                     "gemma3": {"pad_token_id": "<pad>", "eos_token_id": "<eos>", "bos_token_id": "<bos>"}}


def _folder_tokenizer(folder: Path, arch: str):
    """tokenizer.json + tokenizer_config.json of an existing folder (e.g. a real tokenizer)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    config = json.loads((Path(folder) / "tokenizer_config.json").read_text(encoding="utf-8"))
    ids = {key: tok.token_to_id(text) for key, text in _CONFIG_TOKEN_IDS[arch].items()}
    missing = [text for key, text in _CONFIG_TOKEN_IDS[arch].items() if ids[key] is None]
    if missing:
        raise ValueError(f"{folder}/tokenizer.json: no token {missing[0]!r}, which {arch} needs")
    return tok, config, ids


def _config(arch: ArchSpec, dims: dict, style: str, dtype: str, bidirectional: bool, token_ids: dict) -> dict:
    dims = dict(dims)
    pattern = dims.pop("sliding_window_pattern", None)
    n_layers = dims["num_hidden_layers"]
    config = {**_CONFIG_BASE[arch.name], **dims, **token_ids}
    rope = _ROPE[arch.name]
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


def _write_st_files(path: Path, hidden: int, pooling: str, normalize: bool, dense: bool,
                    prompts: dict, max_seq: int, rng: np.random.Generator) -> None:
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    flags = {flag: POOLING_FLAGS[pooling] == flag for flag in (*POOLING_FLAGS.values(), *UNSUPPORTED_POOLING_FLAGS)}
    _write_json(path / "1_Pooling" / "config.json", {"word_embedding_dimension": hidden, **flags, "include_prompt": True})
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
    if dense:  # like EmbeddingGemma: widen, then project to a width unlike hidden
        import safetensors.numpy

        widths = [hidden, 2 * hidden, (3 * hidden) // 4]
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
    bidirectional: bool = False,
    layers: int | None = None,
    sliding_window: int | None = None,
    prompts: dict[str, str] | None = None,
    config_style: str = "v5",
    dtype: str = "bfloat16",
    padding_side: str | None = None,
    tokenizer: str | Path | None = None,
) -> Path:
    """Write a HF model folder at ``path`` (created, must be empty or absent) and return it.

    ``shape`` names an entry of SHAPES[arch] or is a dict of config keys laid over "tiny".
    ``pooling`` defaults to lasttoken (Qwen3) / mean (Gemma3). ``bitnet`` adds the seven
    per-projection norms per layer. ``dense`` adds two sentence-transformers Dense layers.
    ``tokenizer``: a folder whose tokenizer.json + tokenizer_config.json are used instead of the
    trained one; vocab_size grows to cover its ids.
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {sorted(ARCHITECTURES)}, got {arch!r}")
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
        tok, tok_config, token_ids = _folder_tokenizer(tokenizer, arch) if tokenizer else _TOKENIZERS[arch]()
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
        _write_st_files(path, cfg.hidden, pooling, normalize, dense,
                        _DEFAULT_PROMPTS[arch] if prompts is None else prompts, max_seq, rng)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path
