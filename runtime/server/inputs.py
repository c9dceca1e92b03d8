"""The ``input`` / ``inputs`` field of a request -> texts or token id lists, or an ``ApiError`` (400) naming the item."""

from __future__ import annotations

from bitnet_onnx.runtime.server.errors import ApiError

OPENAI_SHAPES = "a string, a list of strings, a list of token ids or a list of such lists"
TEI_SHAPES = "a string or a list of strings"


def parse_openai_input(value, max_inputs: int) -> tuple[list[str] | None, list[list[int]] | None]:
    """(texts, None) or (None, token id lists) from OpenAI's ``input``."""
    if isinstance(value, str):
        return [_text(value, "input")], None
    if not isinstance(value, list):
        raise ApiError(400, f"input must be {OPENAI_SHAPES}, got {_kind(value)}", "input")
    if not value:
        raise ApiError(400, "input must not be empty", "input")
    if _is_id(value[0]):  # one tokenized text
        return None, [_ids(value, "input")]
    _check_count(value, max_inputs, "input")
    if isinstance(value[0], str):
        return [_text(v, f"input[{i}]", "a string") for i, v in enumerate(value)], None
    if isinstance(value[0], list):
        ids = []
        for i, v in enumerate(value):
            if not isinstance(v, list):
                raise ApiError(400, f"input[{i}] is {_kind(v)}, expected a list of token ids like input[0]", "input")
            ids.append(_ids(v, f"input[{i}]"))
        return None, ids
    raise ApiError(400, f"input[0] is {_kind(value[0])}; input must be {OPENAI_SHAPES}", "input")


def parse_tei_inputs(value, max_inputs: int) -> list[str]:
    """Texts from TEI's ``inputs``."""
    if isinstance(value, str):
        return [_text(value, "inputs")]
    if not isinstance(value, list):
        raise ApiError(400, f"inputs must be {TEI_SHAPES}, got {_kind(value)}", "inputs")
    if not value:
        raise ApiError(400, "inputs must not be empty", "inputs")
    _check_count(value, max_inputs, "inputs")
    return [_text(v, f"inputs[{i}]", "a string") for i, v in enumerate(value)]


def _text(value, name: str, expected: str | None = None) -> str:
    if not isinstance(value, str):
        raise ApiError(400, f"{name} is {_kind(value)}, expected {expected}", name.split("[")[0])
    if not value:
        raise ApiError(400, f"{name} is an empty string", name.split("[")[0])
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:  # JSON's "\ud800" escapes: no text, and the tokenizer cannot take it
        raise ApiError(400, f"{name} holds a lone surrogate (U+{ord(value[e.start]):04X}) at character {e.start}",
                       name.split("[")[0]) from None
    return value


def _ids(value: list, name: str) -> list[int]:
    if not value:
        raise ApiError(400, f"{name} is an empty list of token ids", "input")
    for j, v in enumerate(value):
        if not _is_id(v):
            raise ApiError(400, f"{name}[{j}] is {_kind(v)}, expected an integer token id", "input")
    return value


def _check_count(value: list, max_inputs: int, name: str) -> None:
    if len(value) > max_inputs:
        raise ApiError(400, f"{name} has {len(value)} items, more than the limit of {max_inputs} per request", name)


def _is_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value) -> str:
    names = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)
