"""The special tokens around a text and how truncation keeps them: one rule for the runtime, the
strings-in graph and the HF layout's tokenizer.json.

A tokenizer.json's post-processor puts the same special tokens before and after every single text
(Gemma3: ``<bos>`` and, in embedding tokenizers, ``<eos>``; Qwen3's own: none). The manifest's EOS
rule (``append_eos_token_id``, Qwen3's last-token pooling) adds one more at the end unless the
post-processor already ends with it. Truncation to ``max_length`` is transformers' (and fastembed's,
and the ``tokenizers`` library's): the text's own tokens are cut to ``max_length`` less the special
tokens, which are then added, so an over-long text keeps its trailing ``<eos>``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from bitnet_onnx.errors import BitnetOnnxError

# the library's post-processors that add no token to a single text
NO_TOKENS = ("ByteLevel",)


@dataclass(frozen=True)
class SpecialTokens:
    """The ids put before (``prefix``) and after (``suffix``) a single text's own ids."""

    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return len(self.prefix) + len(self.suffix)

    def then(self, outer: "SpecialTokens") -> "SpecialTokens":
        """These tokens, then ``outer``'s around them (a Sequence of post-processors runs in order)."""
        return SpecialTokens(outer.prefix + self.prefix, self.suffix + outer.suffix)

    def with_eos(self, eos_id: int | None) -> "SpecialTokens":
        """The manifest's EOS rule on top: ``eos_id`` appended unless the suffix already ends with it."""
        if eos_id is None or self.suffix[-1:] == (eos_id,):
            return self
        return SpecialTokens(self.prefix, self.suffix + (int(eos_id),))

    def text_room(self, max_length: int) -> int:
        """How many of a text's own ids fit in ``max_length`` next to these tokens."""
        return int(max_length) - self.count


def of_post_processor(post_processor: dict | None, source: str = "tokenizer.json") -> SpecialTokens:
    """The special tokens tokenizer.json's ``post_processor`` (parsed) puts around a single text."""
    if post_processor is None:
        return SpecialTokens()
    if not isinstance(post_processor, dict):
        raise BitnetOnnxError(f"{source}: post_processor is {type(post_processor).__name__}, expected an object")
    kind = post_processor.get("type")
    if kind in NO_TOKENS:
        return SpecialTokens()
    if kind == "Sequence":
        out = SpecialTokens()
        for step in post_processor.get("processors") or []:
            out = out.then(of_post_processor(step, source))
        return out
    if kind in ("BertProcessing", "RobertaProcessing"):
        return SpecialTokens((_pair_id(post_processor, "cls", source),), (_pair_id(post_processor, "sep", source),))
    if kind == "TemplateProcessing":
        return _template(post_processor, source)
    raise BitnetOnnxError(f"{source}: post_processor type {kind!r} is not one the tokenizers library has")


def of_library(tokenizer, source: str = "tokenizer.json") -> SpecialTokens:
    """``of_post_processor`` of a ``tokenizers.Tokenizer``'s post-processor (its JSON state, a few
    hundred bytes: no need to parse the whole tokenizer.json again)."""
    processor = tokenizer.post_processor
    return SpecialTokens() if processor is None else of_post_processor(json.loads(processor.__getstate__()), source)


def _pair_id(processor: dict, key: str, source: str) -> int:
    value = processor.get(key)
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], int)):
        raise BitnetOnnxError(f"{source}: post_processor {processor.get('type')} has no [token, id] {key!r}")
    return value[1]


def _template(processor: dict, source: str) -> SpecialTokens:
    """TemplateProcessing's ``single`` template: the special tokens' ids before and after ``$A``."""
    specials = processor.get("special_tokens") or {}
    before, after, seen = [], [], False
    for piece in processor.get("single") or []:
        if "Sequence" in piece:
            seen = True
            continue
        name = (piece.get("SpecialToken") or {}).get("id")
        ids = (specials.get(name) or {}).get("ids")
        if not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
            raise BitnetOnnxError(f"{source}: post_processor template names special token {name!r} "
                                  "without its ids in special_tokens")
        (after if seen else before).extend(ids)
    if not seen:
        raise BitnetOnnxError(f"{source}: post_processor template's single has no $A (the text)")
    return SpecialTokens(tuple(before), tuple(after))


@dataclass(frozen=True)
class IdsRule:
    """A text's ids under the manifest's rules: the tokenizer's special tokens (``specials``), the EOS
    rule, truncation to ``max_length`` keeping every special token and cutting the text's own ids."""

    specials: SpecialTokens  # the tokenizer's (of_post_processor)
    eos_id: int | None
    max_length: int

    @property
    def ends(self) -> SpecialTokens:
        """The tokens every row starts and ends with: the tokenizer's, the EOS rule's included."""
        return self.specials.with_eos(self.eos_id)

    @property
    def text_room(self) -> int:
        return self.ends.text_room(self.max_length)

    def check(self, source: str) -> None:
        if self.text_room < 0 or self.max_length < 1:
            raise BitnetOnnxError(f"{source}: max_length {self.max_length} leaves no room for the "
                                  f"{self.ends.count} special tokens of every text")

    def split(self, ids: Sequence[int]) -> tuple[tuple[int, ...], list[int], tuple[int, ...]]:
        """(prefix, text ids, suffix) of a row: the special tokens ``ids`` carries at its ends (all of
        ``ends``', the tokenizer's without the EOS rule's, or none), so ids tokenized elsewhere keep
        what they have. With the EOS rule, an EOS the text's ids end with is the rule's, not doubled."""
        ids = [int(v) for v in ids]
        head = self.specials.prefix if tuple(ids[:len(self.specials.prefix)]) == self.specials.prefix else ()
        rest = ids[len(head):]
        tail: tuple[int, ...] = ()
        for candidate in (self.ends.suffix, self.specials.suffix):
            if candidate and len(rest) >= len(candidate) and tuple(rest[len(rest) - len(candidate):]) == candidate:
                tail = candidate
                break
        text = rest[:len(rest) - len(tail)]
        if self.eos_id is not None:
            if text[-1:] == [self.eos_id]:
                text = text[:-1]
            tail = self.ends.suffix if tail else (int(self.eos_id),)
        return head, text, tail

    def apply(self, ids: Sequence[int]) -> tuple[list[int], bool]:
        """(the row, whether text ids were cut): ``split``'s parts with the text cut to fit max_length."""
        head, text, tail = self.split(ids)
        room = int(self.max_length) - len(head) - len(tail)
        return list(head) + text[:max(room, 0)] + list(tail), len(text) > room

