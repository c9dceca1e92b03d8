"""Pieces of HF tokenizer files shared by the families' tokenizer builders."""

from __future__ import annotations


def added_tokens_decoder(tokens: list[tuple[int, str, bool]]) -> dict:
    """tokenizer_config.json's "added_tokens_decoder" of (id, text, special) tokens, as the factory writes it."""
    return {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": special} for i, t, special in tokens}


def added_entry(i: int, content: str, special: bool) -> dict:
    """One entry of tokenizer.json's "added_tokens", in the order HF writes its keys."""
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def decoder_of(added: list[dict]) -> dict:
    """tokenizer_config.json's "added_tokens_decoder" of tokenizer.json "added_tokens" entries."""
    return {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added}
