"""The export's check of the in-graph tokenizer against the ``tokenizers`` library.

Two facts come from running the tokenizer front (``front.front_session``) next to the library: the
special tokens each puts around a text (the op's frame, found by running it; tokenizer.json's, read
from its post-processor and checked against the library's ids; the ids rules swap them), and that
both give the same ids on PROBE_TEXTS; the export refuses a tokenizer that fails either. Both read
the exporter's one parse of tokenizer.json (``bitnet_onnx.tokenizer_json``).
"""

from __future__ import annotations

import numpy as np

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.export.text.front import FRONT_INPUT
from bitnet_onnx.export.text.rules import Frame
from bitnet_onnx.special_tokens import SpecialTokens
from bitnet_onnx.tokenizer_json import TokenizerJson

FRAME_PROBE = "a"  # a text whose ids show the special tokens around it

# Probe texts the export checks the in-graph ids on (the tests use a far larger corpus).
PROBE_TEXTS = [
    "", " ", "a", "Hello, world!", "  two  spaces\tand\ttabs\r\nCRLF\n\nlines  ", "x" * 40,
    "def f(x):\n    return x ** 2  # square", "https://example.com/a?b=1&c=%20", "3.14159 1,000,000 2025-06-01",
    "café naïve Ærø façade", "日本語のテキスト", "中文文本，标点。", "한국어 텍스트", "مرحبا بالعالم", "שלום עולם",
    "Привет, мир", "👩\u200d💻 🇫🇷 🏳️\u200d🌈", "zero\u200bwidth\u200cjoin\u200d", "<|endoftext|> <bos> <eos> <pad>",
    "\u00a0nbsp\u2003em\u3000ideographic", "ǅ ﬁ ① ²", "tab\tend\t", "} else { return -1; }",
    "y" * 150 + " long words",
]


def _run_front(front_session, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return front_session.run(None, {FRONT_INPUT: np.array(texts, dtype=object)})


def _frame(with_specials: list[int], plain: list[int]) -> Frame | None:
    """(prefix, suffix) such that with_specials == prefix + plain + suffix, or None."""
    for start in range(len(with_specials) - len(plain) + 1):
        if with_specials[start:start + len(plain)] == plain:
            return with_specials[:start], with_specials[start + len(plain):]
    return None


def special_frames(tokenizer: TokenizerJson, front_session) -> tuple[Frame, SpecialTokens]:
    """(the tokenizer op's frame around FRAME_PROBE's ids, the special tokens of tokenizer.json's
    post-processor). Refuses a tokenizer whose ids hold no such frame, or whose library ids are not
    the post-processor's tokens around the text's."""
    tok, tok_file = tokenizer.library, tokenizer.path
    specials = tokenizer.specials
    plain = tok.encode(FRAME_PROBE, add_special_tokens=False).ids
    library = tok.encode(FRAME_PROBE, add_special_tokens=True).ids
    op_ids = _run_front(front_session, [FRAME_PROBE])[0][0].tolist()
    op_frame = _frame(op_ids, plain)
    if library != [*specials.prefix, *plain, *specials.suffix] or op_frame is None:
        raise BitnetOnnxError(f"{tok_file}: --text-input: the in-graph tokenizer gives {op_ids} for {FRAME_PROBE!r}, "
                              f"tokenizer.json {library} (its post-processor's tokens {list(specials.prefix)} "
                              f"... {list(specials.suffix)}); it cannot run in the graph")
    return op_frame, specials


def check_tokenizer(tokenizer: TokenizerJson, front_session, frames: tuple[Frame, SpecialTokens], cap: int) -> None:
    """Refuses the export when the in-graph tokenizer and tokenizer.json (its ``tokenizers`` library
    object) disagree on a PROBE_TEXTS text (the op's ids, its special tokens swapped for tokenizer.json's;
    a row the op cut at ``cap`` ids (0: no cap) against as many of the library's)."""
    tok, tok_file = tokenizer.library, tokenizer.path
    (op_prefix, op_suffix), specials = frames
    prefix, suffix = list(specials.prefix), list(specials.suffix)
    raw, mask = _run_front(front_session, PROBE_TEXTS)
    for text, row, row_mask in zip(PROBE_TEXTS, raw, mask):
        ids = row[row_mask == 1].tolist()
        body = ids[len(op_prefix):len(ids) - len(op_suffix)]
        want = tok.encode(text).ids
        if cap and len(ids) == cap:
            want = want[:len(prefix) + len(body)] + suffix
        if prefix + body + suffix != want:
            raise BitnetOnnxError(f"{tok_file}: --text-input: the in-graph tokenizer gives "
                                  f"{ids} for {text!r}, the tokenizers library {want}; this tokenizer cannot run "
                                  "in the graph, export without --text-input")
