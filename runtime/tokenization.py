"""Texts -> (input_ids, attention_mask) by the rules an exported folder's manifest states.

The ``tokenizers`` library does the tokenization (tokenizer.json, special tokens included); this
module applies the manifest's rules on top (``bitnet_onnx.special_tokens.IdsRule``, the strings-in
graph's too): the EOS appended for last-token pooling (unless the tokenizer already put it last),
truncation to ``max_length`` as transformers truncates (the text's own ids cut to max_length less
the special tokens, which stay: Gemma3's trailing ``<eos>`` included; one warning per tokenizer, not
per text), and padding on the manifest's side with its pad id.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from bitnet_onnx import special_tokens
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import MAX_TOKENIZER_JSON_BYTES, check_input_file
from bitnet_onnx.manifest import MANIFEST_NAME, Manifest

from bitnet_onnx.runtime.session import first_line

TOKENIZER_FILE = "tokenizer.json"
CHARS_PER_TOKEN_GUESS = 8  # first prefix tried for a long text, in characters per max_length token
TOKEN_SLACK = 16  # tokens past max_length that a prefix must reach, so the cut cannot touch kept ones

log = logging.getLogger("bitnet_onnx")


class TextTokenizer:
    """Tokenizes texts for one exported folder (``from_folder``) or a manifest + tokenizer.json."""

    def __init__(self, tokenizer_file: Path, manifest: Manifest):
        from tokenizers import Tokenizer

        path = Path(tokenizer_file)
        if not os.path.lexists(path):
            raise BitnetOnnxError(f"{path}: tokenizer file missing")
        check_input_file(path, limit=MAX_TOKENIZER_JSON_BYTES)  # a FIFO would block the Rust reader
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as e:  # the Rust side raises a bare Exception on bad JSON
            raise BitnetOnnxError(f"{path}: not a valid tokenizer.json ({first_line(e)})") from None
        # The manifest's rules are the only ones: no tokenizer-side truncation or padding.
        self._tok.no_truncation()
        self._tok.no_padding()
        self.manifest = manifest
        self.max_length = int(manifest.max_length)
        self.eos_id = manifest.append_eos_token_id
        self.pad_id = int(manifest.pad_token_id)
        self.left_padding = manifest.padding_side == "left"
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))
        self._check_ids_in_vocabulary(path)
        self.rule = special_tokens.IdsRule(special_tokens.of_library(self._tok, str(path)), self.eos_id,
                                           self.max_length)
        self.rule.check(str(path.with_name(MANIFEST_NAME)))
        self._warned = False

    def _check_ids_in_vocabulary(self, path: Path) -> None:
        """The manifest's pad and EOS ids index the embedding table: one out of the vocabulary would
        surface as an ORT Gather error in the middle of a run."""
        for field, token_id in (("pad_token_id", self.pad_id), ("append_eos_token_id", self.eos_id)):
            if token_id is not None and not 0 <= token_id < self.vocab_size:
                raise BitnetOnnxError(f"{path.with_name(MANIFEST_NAME)}: {field} {token_id} is not in the vocabulary "
                                      f"of {path} (ids 0..{self.vocab_size - 1})")

    @classmethod
    def from_folder(cls, folder: str | Path) -> "TextTokenizer":
        manifest = Manifest.read(Path(folder))
        return cls(Path(folder) / TOKENIZER_FILE, manifest)

    def tokenize(self, texts: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Token ids per text, with the EOS rule and truncation applied, unpadded.

        ``truncate=False``: a text longer than ``max_length`` raises instead (naming it).
        """
        texts = check_texts(texts)
        long = {i for i, text in enumerate(texts) if len(text) > self._first_cut}
        encodings = self._tok.encode_batch([t if i not in long else "" for i, t in enumerate(texts)],
                                           add_special_tokens=True)
        ids = [e.ids for e in encodings]
        for i in long:
            ids[i] = self._encode_long(texts[i])
        return [self._apply_rules(x, truncate, f"texts[{i}]") for i, x in enumerate(ids)]

    @property
    def _first_cut(self) -> int:
        return CHARS_PER_TOKEN_GUESS * (self.max_length + TOKEN_SLACK)

    def _encode_long(self, text: str) -> list[int]:
        """A long text's ids, tokenizing only a prefix that grows until it yields TOKEN_SLACK tokens more
        than max_length: memory follows max_length, not the text's size (a 5 MB line is not tokenized
        whole), and the kept tokens are those of the whole text, since a cut changes only the tokens
        next to it."""
        cut = self._first_cut
        while True:
            ids = self._tok.encode(text[:cut], add_special_tokens=True).ids
            if cut >= len(text) or len(ids) > self.max_length + TOKEN_SLACK:
                return ids
            cut *= 2

    def encode_plain(self, text: str) -> list[int]:
        """tokenizer.json's own ids for ``text`` (its special tokens, none of the manifest's rules)."""
        return list(self._tok.encode(text, add_special_tokens=True).ids)

    def prepare_ids(self, ids: Sequence[Sequence[int]], truncate: bool = True) -> list[list[int]]:
        """Token ids a caller tokenized itself, checked against the vocabulary, with the same EOS and
        truncation rules as ``tokenize``: the special tokens they carry at their ends are kept, the ids
        between them cut (``IdsRule.split``; so ``prepare_ids(tokenize(texts))`` changes nothing)."""
        out = []
        for i, seq in enumerate(ids):
            seq = [int(v) for v in seq]
            bad = next((v for v in seq if not 0 <= v < self.vocab_size), None)
            if bad is not None:
                raise BitnetOnnxError(f"ids[{i}]: token id {bad} is outside the vocabulary [0, {self.vocab_size})")
            out.append(self._apply_rules(seq, truncate, f"ids[{i}]"))
        return out

    def pad(self, ids: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Pads to the longest sequence given: int64 (input_ids, attention_mask) [len(ids), S]."""
        width = max((len(x) for x in ids), default=0)
        input_ids = np.full((len(ids), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, x in enumerate(ids):
            n = len(x)
            if n == 0:
                continue
            cols = slice(width - n, width) if self.left_padding else slice(0, n)
            input_ids[row, cols] = x
            mask[row, cols] = 1
        return input_ids, mask

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Tokenizes and pads ``texts``: int64 (input_ids, attention_mask) [B, S]."""
        return self.pad(self.tokenize(texts))

    def _apply_rules(self, ids: list[int], truncate: bool = True, name: str = "text") -> list[int]:
        ids, cut = self.rule.apply(ids)
        if cut:
            if not truncate:
                raise TooLongError(f"{name} has more than max_length {self.max_length} tokens")
            if not self._warned:
                log.warning("bitnet-onnx: texts longer than %d tokens are truncated (max_length in %s)",
                            self.max_length, "bitnet_onnx.json")
                self._warned = True
        if not ids:  # an empty text with no special tokens: one pad token keeps pooling defined
            ids = [self.pad_id]
        return ids


class TooLongError(BitnetOnnxError):
    """A text or id list over ``max_length`` when truncation was not allowed."""


def check_texts(texts) -> list[str]:
    if isinstance(texts, str):
        raise BitnetOnnxError("texts must be a list of strings, not one string")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise BitnetOnnxError(f"texts[{i}] is {type(t).__name__}, expected str")
        _check_encodable(t, i)
    return texts


def _check_encodable(text: str, index: int) -> None:
    """A lone surrogate (from JSON's "\\ud800" or surrogateescape'd bytes) has no UTF-8 form: the tokenizer
    would raise a TypeError deep inside; say which text and where instead."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise BitnetOnnxError(f"texts[{index}] holds a lone surrogate (U+{ord(text[e.start]):04X}) at character "
                              f"{e.start}: not valid Unicode text") from None

