"""A HF tokenizer.json (and tokenizer_config.json) rebuilt from a GGUF file's tokenizer.ggml.* keys.

The inverse of what llama.cpp's converter (and ours, ``convert_gguf/tokenizer.py``) writes:

- ``gpt2``: byte-level BPE with the stored merges; the pre-tokenizer's split pattern comes from its
  llama.cpp name (``tokenizer.ggml.pre``), so only names in ``PRE_TOKENIZER_PATTERNS`` are accepted.
- ``llama``: SentencePiece-style BPE (``▁`` for spaces, byte fallback ``<0xNN>``). The file holds
  scores, not merges: SentencePiece merges the adjacent pair whose result scores highest, which is a
  BPE whose merges are every (left, right) split of each token, ranked by the token's score.

CONTROL tokens become special added tokens, USER_DEFINED ones plain added tokens; BOS/EOS are added
by the post-processor as tokenizer.ggml.add_bos_token / add_eos_token say, except the EOS the
architecture appends itself (``ArchSpec.append_eos``: the runtime adds it, as for a HF folder).
A file that carries ``tokenizer.huggingface.json`` is used as it is.
"""

from __future__ import annotations

import json

from bitnet_onnx.errors import BitnetOnnxError

# gguf.TokenType values
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# llama.cpp pre-tokenizer name -> split regex (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_QWEN2)
PRE_TOKENIZER_PATTERNS = {
    "qwen2": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+"),
}
SPACE = "▁"
_BYTE_LEVEL = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def _need(meta: dict, key: str, source: str):
    if key not in meta:
        raise BitnetOnnxError(f"{source}: metadata key {key} is missing (needed to rebuild the tokenizer)")
    return meta[key]


def _added_tokens(tokens: list[str], types: list[int]) -> list[dict]:
    return [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": ty == CONTROL}
            for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (CONTROL, USER_DEFINED)]


def _added_ends(meta: dict, tokens: list[str], append_eos: str | None) -> list[tuple[str, str, int]]:
    """(side, token, id) the tokenizer itself adds: BOS/EOS as flagged, less the EOS the runtime appends."""
    ends = []
    for side in ("bos", "eos"):
        token_id = meta.get(f"tokenizer.ggml.{side}_token_id")
        if meta.get(f"tokenizer.ggml.add_{side}_token") and token_id is not None:
            if not (side == "eos" and tokens[int(token_id)] == append_eos):
                ends.append((side, tokens[int(token_id)], int(token_id)))
    return ends


def _post_processor(ends: list[tuple[str, str, int]]) -> dict | None:
    if not ends:
        return None
    bos = [{"SpecialToken": {"id": t, "type_id": 0}} for side, t, _ in ends if side == "bos"]
    eos = [{"SpecialToken": {"id": t, "type_id": 0}} for side, t, _ in ends if side == "eos"]
    seq = [{"Sequence": {"id": "A", "type_id": 0}}]
    seq_b = [{"Sequence": {"id": "B", "type_id": 1}}]
    return {"type": "TemplateProcessing", "single": bos + seq + eos, "pair": bos + seq + eos + seq_b + eos,
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for _, t, i in ends}}


def _gpt2(meta: dict, tokens: list[str], types: list[int], source: str) -> dict:
    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    if pre not in PRE_TOKENIZER_PATTERNS:
        raise BitnetOnnxError(f"{source}: BPE pre-tokenizer {pre!r} is not supported for import "
                              f"(supported: {', '.join(PRE_TOKENIZER_PATTERNS)})")
    merges = _need(meta, "tokenizer.ggml.merges", source)
    vocab = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == NORMAL}
    return {
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PRE_TOKENIZER_PATTERNS[pre]}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", **_BYTE_LEVEL}]},
        "decoder": {"type": "ByteLevel", **_BYTE_LEVEL},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [m.split(" ", 1) for m in merges]},
    }


def spm_merges(tokens: list[str], types: list[int], scores: list[float]) -> list[list[str]]:
    """Every (left, right) split of each normal token into two normal tokens, best-scoring result first."""
    normal = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty == NORMAL}
    ranked = []
    for token, i in normal.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in normal and right in normal:
                ranked.append((-scores[i], i, normal[left], normal[right], left, right))
    ranked.sort(key=lambda r: r[:4])
    return [[left, right] for *_, left, right in ranked]


def _llama(meta: dict, tokens: list[str], types: list[int], source: str) -> dict:
    scores = [float(s) for s in _need(meta, "tokenizer.ggml.scores", source)]
    if len(scores) != len(tokens):
        raise BitnetOnnxError(f"{source}: tokenizer.ggml.scores has {len(scores)} entries for {len(tokens)} tokens")
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    vocab = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if ty != UNUSED}
    normalizers = [{"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]
    decoders = [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]
    if meta.get("tokenizer.ggml.add_space_prefix", False):
        normalizers.insert(0, {"type": "Prepend", "prepend": SPACE})
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {"type": "BPE", "dropout": None, "unk_token": None if unk is None else tokens[int(unk)],
                  "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
                  "byte_fallback": True, "ignore_merges": False, "vocab": vocab,
                  "merges": spm_merges(tokens, types, scores)},
    }


def tokenizer_files(meta: dict, source: str, append_eos: str | None = None) -> tuple[str, dict]:
    """(tokenizer.json text, tokenizer_config.json data) for a GGUF's metadata."""
    from tokenizers import Tokenizer

    model = _need(meta, "tokenizer.ggml.model", source)
    tokens = [str(t) for t in _need(meta, "tokenizer.ggml.tokens", source)]
    types = [int(t) for t in meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)]
    if len(types) != len(tokens):
        raise BitnetOnnxError(f"{source}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    for key in ("bos", "eos", "unknown", "padding"):
        token_id = meta.get(f"tokenizer.ggml.{key}_token_id")
        if token_id is not None and not 0 <= int(token_id) < len(tokens):
            raise BitnetOnnxError(f"{source}: tokenizer.ggml.{key}_token_id {token_id} is not a token id")
    if "tokenizer.huggingface.json" in meta:
        text = str(meta["tokenizer.huggingface.json"])
    else:
        if model == "gpt2":
            body, post = _gpt2(meta, tokens, types, source), {"type": "ByteLevel", **_BYTE_LEVEL}
        elif model == "llama":
            body, post = _llama(meta, tokens, types, source), None
        else:
            raise BitnetOnnxError(f"{source}: tokenizer model {model!r} is not supported for import (gpt2, llama)")
        data = {"version": "1.0", "truncation": None, "padding": None,
                "added_tokens": _added_tokens(tokens, types),
                "normalizer": body["normalizer"], "pre_tokenizer": body["pre_tokenizer"],
                "post_processor": _post_processor(_added_ends(meta, tokens, append_eos)) or post,
                "decoder": body["decoder"], "model": body["model"]}
        text = json.dumps(data, ensure_ascii=False)
    try:
        Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises a bare Exception
        raise BitnetOnnxError(f"{source}: the tokenizer rebuilt from its metadata does not load "
                              f"({str(e).splitlines()[0]})") from None
    config = {"padding_side": "right", "clean_up_tokenization_spaces": False}
    for key, name in (("bos", "bos_token"), ("eos", "eos_token"), ("unknown", "unk_token"), ("padding", "pad_token")):
        token_id = meta.get(f"tokenizer.ggml.{key}_token_id")
        if token_id is not None:
            config[name] = tokens[int(token_id)]
    added = {side for side, _, _ in _added_ends(meta, tokens, append_eos)}
    config.update({f"add_{side}_token": side in added for side in ("bos", "eos")})
    return text, config
