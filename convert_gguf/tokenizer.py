"""The tokenizer part of a GGUF file, following llama.cpp's conventions.

Byte-level BPE tokenizers (Qwen3) are written as ``gpt2`` with merges and a pre-tokenizer name
found from the hash of llama.cpp's check text; SentencePiece-style BPE tokenizers with byte
fallback (Gemma3) as ``llama`` with scores derived from merge ranks. Special token ids come from
gguf's SpecialVocab (tokenizer.json + tokenizer_config.json).
"""

from __future__ import annotations

import logging
from hashlib import sha256
from pathlib import Path

from bitnet_onnx.arch import ArchSpec
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import MAX_TOKENIZER_JSON_BYTES, read_json

log = logging.getLogger(__name__)

# llama.cpp's check text, character for character (convert_hf_to_gguf.py, get_vocab_base_pre,
# `chktxt`): the sha256 of str(token ids) of this text identifies a BPE pre-tokenizer.
CHECK_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ "
    "🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
    "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, "
    "'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL"
)
# sha256 of str(token ids of CHECK_TEXT) -> llama.cpp pre-tokenizer name: every entry of
# get_vocab_base_pre (ggml-org/llama.cpp convert_hf_to_gguf.py) for the families we convert.
# Gemma3 has none: llama.cpp converts it as SentencePiece (_set_vocab_sentencepiece), whose
# tokenizer.ggml.pre is "default" without a hash (SPM_PRE_TOKENIZER below).
KNOWN_PRE_TOKENIZERS = {
    # ref: https://huggingface.co/Qwen/Qwen1.5-7B -- the Qwen2/Qwen2.5/Qwen3 byte-level BPE
    # (tokenizer.json without a post-processor that appends tokens)
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",
    # ref: https://huggingface.co/Qwen/Qwen3-Embedding-0.6B -- the same, with <|endoftext|> appended
    # by its tokenizer.json post-processor
    "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c": "qwen2",
}
SPM_PRE_TOKENIZER = "default"
UNUSED_SCORE, ADDED_SCORE = -10000.0, -1000.0


def check_hash(tokenizer) -> str:
    return sha256(str(tokenizer.encode(CHECK_TEXT).ids).encode()).hexdigest()


# Added tokens that llama.cpp's converter makes CONTROL although tokenizer.json does not call them
# special (convert_hf_to_gguf.py, does_token_look_special); every other non-special added token is
# USER_DEFINED (e.g. Qwen3's <think>, Gemma3's <table> and whitespace runs).
_SPECIAL_LOOKING = ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
_SPECIAL_LOOKING_DELIMITERS = (("<|", "|>"), ("<\uff5c", "\uff5c>"), ("<unused", ">"))


def _looks_special(token: str) -> bool:
    return token in _SPECIAL_LOOKING or any(token.startswith(a) and token.endswith(b)
                                            for a, b in _SPECIAL_LOOKING_DELIMITERS)


def _is_byte_token(token: str) -> bool:
    return len(token) == 6 and token.startswith("<0x") and token.endswith(">")


class VocabSource:
    """tokenizer.json of a model folder: the model's vocab, merges and added tokens."""

    def __init__(self, folder: Path, n_vocab: int):
        self.file = folder / "tokenizer.json"
        # read through io first: a FIFO or a device there would block or never end
        self.data = read_json(self.file, limit=MAX_TOKENIZER_JSON_BYTES, missing=" (the GGUF needs the tokenizer)")
        try:
            from tokenizers import Tokenizer

            self.tokenizer = Tokenizer.from_file(str(self.file))
        except FileNotFoundError:
            raise BitnetOnnxError(f"{self.file}: file not found (the GGUF needs the tokenizer)") from None
        except Exception as e:  # tokenizers raises a bare Exception on malformed files
            raise BitnetOnnxError(f"{self.file}: not a valid tokenizer ({str(e).splitlines()[0]})") from None
        model = self.data.get("model") or {}
        if model.get("type") != "BPE":
            raise BitnetOnnxError(f"{self.file}: tokenizer model {model.get('type')!r} is not supported (BPE only)")
        self.byte_fallback = bool(model.get("byte_fallback"))
        self.merges = model.get("merges") or []
        self.added = {int(t["id"]): t for t in self.data.get("added_tokens", [])}
        self.id_to_token = {int(i): t for t, i in model["vocab"].items()}
        self.id_to_token.update({i: t["content"] for i, t in self.added.items()})
        too_big = [i for i in self.id_to_token if i >= n_vocab]
        if too_big:
            raise BitnetOnnxError(f"{self.file}: token id {max(too_big)} is not below config.json vocab_size {n_vocab}")
        self.n_vocab = n_vocab


def add_vocab(writer, folder: Path, arch: ArchSpec, n_vocab: int, pre_tokenizer: str | None = None) -> str:
    """Write tokenizer.ggml.* keys; returns the tokenizer model name ("gpt2" or "llama")."""
    import gguf

    source = VocabSource(folder, n_vocab)
    if source.byte_fallback:
        _add_spm(writer, source, pre_tokenizer or SPM_PRE_TOKENIZER)
        model, special = "llama", gguf.SpecialVocab(folder, load_merges=False, n_vocab=n_vocab)
    else:
        _add_gpt2(writer, source, pre_tokenizer)
        model, special = "gpt2", gguf.SpecialVocab(folder, load_merges=True, n_vocab=n_vocab)
    if arch.append_eos:  # the model pools on this token: llama.cpp must append it (as the runtime does)
        eos = source.tokenizer.token_to_id(arch.append_eos)
        if eos is None:
            raise BitnetOnnxError(f"{source.file}: {arch.name} needs the token {arch.append_eos!r}, which is missing")
        special.special_token_ids["eos"] = eos
        special.add_special_token["eos"] = True
    special.add_to_gguf(writer, quiet=True)
    return model


def _pre_tokenizer(source: VocabSource, override: str | None) -> str:
    digest = check_hash(source.tokenizer)
    if override:
        if digest in KNOWN_PRE_TOKENIZERS and KNOWN_PRE_TOKENIZERS[digest] != override:
            log.warning("--pre-tokenizer %s overrides the recognized %s", override, KNOWN_PRE_TOKENIZERS[digest])
        return override
    if digest not in KNOWN_PRE_TOKENIZERS:
        raise BitnetOnnxError(f"{source.file}: BPE pre-tokenizer not recognized (check-text hash {digest}); "
                              f"pass --pre-tokenizer NAME with llama.cpp's name for it (e.g. qwen2)")
    return KNOWN_PRE_TOKENIZERS[digest]


def _add_gpt2(writer, source: VocabSource, override: str | None) -> None:
    import gguf

    pre = _pre_tokenizer(source, override)
    tokens, types = [], []
    for i in range(source.n_vocab):
        token = source.id_to_token.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in source.added:
            special = source.added[i].get("special") or _looks_special(token)
            tokens.append(token if special else token.replace("▁", " "))
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(token)
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)


def _add_spm(writer, source: VocabSource, pre: str) -> None:
    import gguf

    rank_score: dict[str, float] = {}
    for rank, merge in enumerate(source.merges):
        result = "".join(merge) if isinstance(merge, list) else merge.replace(" ", "", 1)
        rank_score.setdefault(result, -float(rank))
    tokens, scores, types = [], [], []
    for i in range(source.n_vocab):
        token = source.id_to_token.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            scores.append(UNUSED_SCORE)
            types.append(gguf.TokenType.UNUSED)
            continue
        if i in source.added:
            special = source.added[i].get("special") or _looks_special(token)
            # llama.cpp matches user-defined tokens on the raw text: spaces, not "▁"
            tokens.append(token if special else token.replace("▁", " "))
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
            scores.append(ADDED_SCORE)
            continue
        tokens.append(token)
        if _is_byte_token(token):
            types.append(gguf.TokenType.BYTE)
            scores.append(0.0)
        elif token == source.data["model"].get("unk_token"):
            types.append(gguf.TokenType.UNKNOWN)
            scores.append(0.0)
        else:
            types.append(gguf.TokenType.NORMAL)
            scores.append(rank_score.get(token, 0.0))
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_add_space_prefix(False)
