"""A tokenizer.json read and parsed once, for every step of an export that needs it.

The exporter's tokenizer facts, the strings-in graph's tokenizer node, its probe and its ids rules
all read the same file: a Gemma3 tokenizer.json of 262,144 tokens takes seconds and hundreds of
MB to parse, so ``read_tokenizer_json`` reads it once (its text, the ``tokenizers`` library's
object; the JSON object on first use) and that parsed result is passed down.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.io import MAX_TOKENIZER_JSON_BYTES, read_input_file
from bitnet_onnx.special_tokens import SpecialTokens, of_post_processor

TOKENIZER_JSON = "tokenizer.json"


@dataclass(frozen=True, eq=False)
class TokenizerJson:
    """One tokenizer.json: ``text`` (its UTF-8 text), ``library`` (a ``tokenizers.Tokenizer`` of it,
    with no truncation or padding of its own), ``data`` (the parsed JSON object, made on first use:
    an export without --text-input never needs it)."""

    path: Path
    text: str
    library: Any

    @cached_property
    def data(self) -> dict:
        try:
            data = json.loads(self.text)
        except json.JSONDecodeError as e:
            raise BitnetOnnxError(f"{self.path}: not a valid tokenizer.json ({_first_line(e)})") from None
        except RecursionError:  # [[[[...: json recurses once per level
            raise BitnetOnnxError(f"{self.path}: not a valid tokenizer.json (nested too deeply)") from None
        if not isinstance(data, dict):
            raise BitnetOnnxError(f"{self.path}: not a valid tokenizer.json (a JSON {type(data).__name__}, "
                                  "not an object)")
        return data

    @property
    def specials(self) -> SpecialTokens:
        """The special tokens its post-processor puts around a single text."""
        return of_post_processor(self.data.get("post_processor"), str(self.path))


def read_tokenizer_json(path: str | Path) -> TokenizerJson:
    """Reads ``path`` once (a regular file of at most MAX_TOKENIZER_JSON_BYTES) into the ``tokenizers``
    library; one line naming it when it is not a tokenizer.json the library loads."""
    from tokenizers import Tokenizer

    path = Path(path)
    raw = read_input_file(path, limit=MAX_TOKENIZER_JSON_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BitnetOnnxError(f"{path}: not a valid tokenizer.json (not UTF-8: {e.reason} at byte {e.start})") from None
    try:
        library = Tokenizer.from_str(text)
    except Exception as e:  # the Rust side raises a bare Exception on a bad file
        raise BitnetOnnxError(f"{path}: not a valid tokenizer.json ({_first_line(e)})") from None
    library.no_truncation()
    library.no_padding()
    return TokenizerJson(path, text, library)


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]
