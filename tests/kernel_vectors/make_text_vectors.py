"""Tables and reference vectors for customops/tests/text_kernel_test.cc (the text kernels).

Usage: python make_text_vectors.py OUT_DIR [--no-real]

References: Python's ``unicodedata`` for NormalizeNFC, the HF ``tokenizers`` library for
ByteFallbackBpe (encode, no special tokens); a byte string Python's strict UTF-8 decoder refuses
is expected to be refused at the same byte offset (UnicodeDecodeError.start). The tables are the
op's attributes as the exporter makes them: ``normalize_nfc.nfc_tables()`` and the attributes of
``byte_fallback_bpe.bpe_node`` for the factory's Gemma3 tokenizer and (unless --no-real) the real
one (bitnet_onnx.testing.real_tokenizers).

Writes ``NAME.tables`` + ``NAME.vectors`` per table set and ``index.txt`` (lines "nfc NAME" or
"bpe NAME"). File layout (little-endian): an 8-byte magic, then items, each either
  b"I" | u64 count | int64 [count]                      a list of integers, or
  b"S" | u64 count | (u64 length | bytes [length])*     a list of byte strings.
  NAME.tables (nfc, b"TXTNFT01"): I combining_classes | I decompositions | I compositions (flattened)
  NAME.tables (bpe, b"TXTBPT01"): S vocab | I vocab_ids | I merges | S added_tokens | I added_token_ids
                                  | I [unk_id, fuse_unk, byte_fallback] | S [space_replacement]
  NAME.vectors (nfc, b"TXTNFV01"): S inputs | I status | S expected
  NAME.vectors (bpe, b"TXTBPV01"): S inputs | I status | I id_counts | I ids (concatenated)
status: -1 when the input is valid UTF-8 (expected holds the result), else the byte offset of
its first invalid sequence (the result must be that error; expected is empty / has no ids).
"""

from __future__ import annotations

import json
import random
import struct
import sys
import tempfile
import unicodedata
from pathlib import Path

from bitnet_onnx.customops.normalize_nfc import nfc_tables
from bitnet_onnx.testing.real_tokenizers import VARIED_CORPUS

VALID = -1

# Ill-formed UTF-8 (Unicode Table 3-7): truncated sequences, overlong forms, surrogates, beyond
# U+10FFFF, bytes that never occur, stray continuation bytes.
BROKEN = [
    b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xe2", b"\xf4\x8f\xbf",
    b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80",
    b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf7\xbf\xbf\xbf", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff",
    b"\x80", b"\xbf", b"\xc3\x28", b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc", b"\xc3\xa9\xa9",
]


def _status(raw: bytes) -> tuple[int, str | None]:
    """(VALID, text) or (offset of the first invalid sequence, None)."""
    try:
        return VALID, raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start, None


# -- the file format -------------------------------------------------------------------------------

def _ints(values) -> bytes:
    values = list(values)
    return b"I" + struct.pack("<Q", len(values)) + struct.pack(f"<{len(values)}q", *values)


def _strings(values) -> bytes:
    parts = [b"S", struct.pack("<Q", len(values))]
    for v in values:
        parts += [struct.pack("<Q", len(v)), v]
    return b"".join(parts)


# -- NFC ----------------------------------------------------------------------------------------------

def _nfc_pool(rng: random.Random) -> dict[str, list[str]]:
    tables = nfc_tables()
    marks = [chr(cp) for cp in tables["combining_classes"][0::2]]
    decomposable = [chr(cp) for cp in tables["decompositions"][0::3]]
    return {
        "ascii": list("abcdeAEIOUnsz019 .,\t\n"),
        "marks": marks,
        "decomposable": decomposable,
        "nfd": [unicodedata.normalize("NFD", c) for c in decomposable],
        "hangul": [chr(rng.randrange(0xAC00, 0xAC00 + 11172)) for _ in range(200)],
        "jamo": [chr(c) for c in [*range(0x1100, 0x1113), *range(0x1161, 0x1176), *range(0x11A7, 0x11C3)]],
        "astral": [chr(rng.randrange(0x10000, 0x110000)) for _ in range(100)],
        "bmp": [chr(c) for c in (rng.randrange(0xA0, 0xFFFE) for _ in range(300)) if not 0xD800 <= c <= 0xDFFF],
    }


# Hand-picked: canonical ordering, blocking, singletons, exclusions, non-starter decompositions,
# Hangul LV/LVT/jamo, astral decompositions, Indic two-part vowels.
NFC_SPECIAL = [
    "e\u0301", "a\u0316\u0301", "a\u0301\u0316", "\u1e0b\u0323", "q\u0307\u0323", "\u0958", "\u212b", "\u2126",
    "\u0344", "\u0f73", "\u0f75", "\u0f81", "\u1100\u1161", "\u1100\u1161\u11a8", "\uac00\u11a8",
    "\uac01\u11a8", "\u1100\u0301\u1161", "\u1161\u11a8", "\u11a7", "\U0001d15e", "\U0001d160", "\U0001d1bb",
    "\u0cc6\u0cc2\u0cd5", "\u0b47\u0b3e", "\u09c7\u09be", "\u0dd9\u0dcf\u0dca", "A\u030a\u0323", "\u00c5\u0323",
    "\u0041\u0300\u0300\u0300", "\u03d2\u0301", "\u2adc", "\u0340\u0341\u0343", "\u0e33", "\U0002f800",
    "\u05d0\u05b7\u05bc", "\u1026\u102e", "\u3099\u304b", "\u304b\u3099", "\uff76\uff9e",
]


def _nfc_texts(rng: random.Random) -> list[bytes]:
    pool = _nfc_pool(rng)
    kinds = list(pool)
    base = list(VARIED_CORPUS) + NFC_SPECIAL
    texts = [form for t in base for form in dict.fromkeys(unicodedata.normalize(f, t) for f in ("NFC", "NFD", "NFKD"))]
    texts += [t for t in base if unicodedata.normalize("NFC", t) != t]  # as given, when not NFC already
    for _ in range(600):
        texts.append("".join(rng.choice(pool[rng.choice(kinds)]) for _ in range(rng.randint(1, 30))))
    # Long runs of marks of mixed classes (the kernel's O(n log n) ordering path).
    for length in (33, 40, 100, 1000):
        texts.append(rng.choice("aeAE\u1100") + "".join(rng.choice(pool["marks"]) for _ in range(length)))
    texts.append("".join(rng.choice(pool[rng.choice(kinds)]) for _ in range(100_000)))  # one big text
    raw = [t.encode("utf-8") for t in texts]
    for broken in BROKEN:
        for prefix in ("", "e\u0301", "abc", "\u00e9", "\uac00", "a\u0301\u0316"):
            raw.append(prefix.encode() + broken + "tail\u0301".encode())
        raw.append(broken)
    raw += [rng.randbytes(rng.randint(0, 40)) for _ in range(300)]
    return raw


def _write_nfc(out: Path, name: str, rng: random.Random) -> int:
    tables = nfc_tables()
    (out / f"{name}.tables").write_bytes(b"TXTNFT01" + b"".join(
        _ints(tables[attr]) for attr in ("combining_classes", "decompositions", "compositions")))
    inputs = _nfc_texts(rng)
    statuses, expected = [], []
    for raw in inputs:
        status, text = _status(raw)
        statuses.append(status)
        expected.append(b"" if text is None else unicodedata.normalize("NFC", text).encode("utf-8"))
    (out / f"{name}.vectors").write_bytes(b"TXTNFV01" + _strings(inputs) + _ints(statuses) + _strings(expected))
    return len(inputs)


# -- ByteFallbackBpe ------------------------------------------------------------------------------

def _bpe_tables(tokenizer_json: Path) -> bytes:
    """The op's attributes, from the node the exporter builds (bpe_node), as NAME.tables."""
    from onnx import helper

    from bitnet_onnx.customops.byte_fallback_bpe import bpe_node

    parsed = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    node = bpe_node(parsed, tokenizer_json, "text", ["input_ids", "attention_mask"], max_length=0)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def strings(name: str) -> list[bytes]:
        return list(attrs[name].string_data) if name in attrs else []

    space = attrs.get("space_replacement", "\u2581".encode())
    return b"TXTBPT01" + b"".join([
        _strings(strings("vocab")), _ints(attrs.get("vocab_ids", [])), _ints(attrs.get("merges", [])),
        _strings(strings("added_tokens")), _ints(attrs.get("added_token_ids", [])),
        _ints([attrs.get("unk_id", -1), attrs.get("fuse_unk", 0), attrs.get("byte_fallback", 0)]),
        _strings([space if isinstance(space, bytes) else space.encode()])])


def _bpe_texts(tokenizer, rng: random.Random, count: int) -> list[bytes]:
    """Texts from the tokenizer's own pieces (vocab tokens, added tokens and their prefixes),
    characters it lacks (byte fallback), spaces and whitespace runs, plus broken UTF-8."""
    vocab = sorted(t.replace("\u2581", " ") for t in tokenizer.get_vocab())  # sorted: the same texts every run
    added = [t.content for _, t in sorted(tokenizer.get_added_tokens_decoder().items())]
    pool = {
        "vocab": vocab,
        "added": added,
        "added_prefix": [t[:rng.randint(1, max(1, len(t) - 1))] for t in added],
        "unknown": list("東京敏捷狐狸한국어🙂🚀👍🏽\u200d\ufe0f𝄞€"),
        "space": [" ", "  ", "\t", "\n", "\n\n", "\r\n", "\u2581"],
        "byte_names": ["<0x41>", "<0xE2>", "<0x", "<unk>"],
        "words": ["the", "model", "café", "naïve", "x", "²", "ONNX", "I"],
    }
    kinds = list(pool)
    texts = list(VARIED_CORPUS) + ["", " ", "x ²", "a b", " é", "<bos>", "<bo", "<bos", "<start_of_tur",
                                   "<start_of_turn>user\nHi<end_of_turn>", "<bos>" * 10, "<<bos>>"]
    for _ in range(count):
        texts.append("".join(rng.choice(pool[rng.choice(kinds)]) for _ in range(rng.randint(1, 25))))
    texts += ["x" * 20_000, "".join(rng.choice(pool[rng.choice(kinds)]) for _ in range(20_000))]
    raw = [t.encode("utf-8") for t in texts]
    for broken in BROKEN:
        raw.append(b"ab " + broken + b" cd")
        raw.append(rng.choice(added).encode() + broken)
    raw += [rng.randbytes(rng.randint(0, 30)) for _ in range(100)]
    return raw


def _write_bpe(out: Path, name: str, tokenizer_json: Path, rng: random.Random, count: int) -> int:
    from tokenizers import Tokenizer

    (out / f"{name}.tables").write_bytes(_bpe_tables(tokenizer_json))
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    inputs = _bpe_texts(tokenizer, rng, count)
    statuses, counts, ids = [], [], []
    for raw in inputs:
        status, text = _status(raw)
        statuses.append(status)
        row = [] if text is None else tokenizer.encode(text, add_special_tokens=False).ids
        counts.append(len(row))
        ids += row
    (out / f"{name}.vectors").write_bytes(b"TXTBPV01" + _strings(inputs) + _ints(statuses) + _ints(counts) + _ints(ids))
    return len(inputs)


def write_all(out: Path, real: bool = True) -> list[tuple[str, str, int]]:
    """(kind, name, vector count) per table set written to out."""
    from bitnet_onnx.testing import make_model

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20260217)
    index = [("nfc", "nfc-unicodedata", _write_nfc(out, "nfc-unicodedata", rng))]
    with tempfile.TemporaryDirectory() as tmp:
        factory = make_model(Path(tmp) / "gemma3", "gemma3") / "tokenizer.json"
        index.append(("bpe", "bpe-factory-gemma3", _write_bpe(out, "bpe-factory-gemma3", factory, rng, 400)))
    if real:
        from bitnet_onnx.testing.real_tokenizers import real_tokenizer_dir

        path = real_tokenizer_dir("gemma3") / "tokenizer.json"
        index.append(("bpe", "bpe-real-gemma3", _write_bpe(out, "bpe-real-gemma3", path, rng, 150)))
    (out / "index.txt").write_text("".join(f"{kind} {name}\n" for kind, name, _ in index))
    return index


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (1, 2) or (len(args) == 2 and args[1] != "--no-real"):
        sys.exit("usage: make_text_vectors.py OUT_DIR [--no-real]")
    for kind, name, count in write_all(Path(args[0]), real="--no-real" not in args):
        print(kind, name, count)
