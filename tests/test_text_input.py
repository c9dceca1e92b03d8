"""Strings in, embeddings out (export --text-input): the tokenizer and the manifest's rules in the graph.

- ids: the strings-in graph's input_ids / attention_mask equal TextTokenizer's (the ``tokenizers``
  library plus the manifest's EOS, truncation and padding rules) on a varied corpus of >= 300 texts
  (NFD accents included: the graph normalizes to NFC like Qwen's tokenizer.json), with the REAL
  Qwen3 and Gemma3 tokenizers (bitnet_onnx.testing.real_tokenizers) and the factory's tokenizers;
- embeddings: the strings-in graph equals Embedder.encode on the token-ids model (<= 1e-5) for both
  archs, i2s and int8, single texts and mixed-length batches, with and without a prompt;
- include_prompt: false poolings: the graph counts the prompt's tokens itself;
- the export: manifest fields, shared external data, the CLI flag, refusals; bad input.
The ops themselves: tests/test_nfc_op.py, tests/test_bpe_op.py; the C and C++ hosts:
tests/test_examples_text.py.
"""

from __future__ import annotations

import json
import random
import re
import unicodedata
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bitnet_onnx import customops
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.cli import main as cli_main
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.export import text_input, writer
from bitnet_onnx.export.exporter import export
from bitnet_onnx.export.text.front import UTF8_GUARD_NAME
from bitnet_onnx.manifest import TEXT_MODEL_NAME, Manifest
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.runtime.session import create_session
from bitnet_onnx.runtime.tokenization import TextTokenizer
from bitnet_onnx.testing.real_tokenizers import VARIED_CORPUS, make_real_tokenizer_model, real_tokenizer_dir

ATOL = 1e-5


# -- the corpus ---------------------------------------------------------------------------------
def varied_corpus(seed: int = 0) -> list[str]:
    """>= 300 texts: every category of the issue, several generated variants of each."""
    rng = random.Random(seed)
    words = ["the", "model", "embeds", "ternary", "weights", "fast", "ONNX", "Runtime", "text", "query", "a", "I"]
    pools = {
        "cjk": "敏捷的棕色狐狸跳过了懒狗今日はいい天気ですねカタカナ漢字東京中文",
        "korean": "빠른갈색여우가게으른개를뛰어넘는다한국어텍스트",
        "arabic": "مرحبا بالعالم كيف حالك اللغة العربية",
        "accents": "éèêëàâäôöûüçñÉÀÇåøæœßğış",
        "emoji": ["👨\u200d👩\u200d👧", "👍🏽", "🇫🇷", "🇯🇵", "🏳\ufe0f\u200d🌈", "😶\u200d🌫\ufe0f", "🚀", "✓", "🙂"],
        "zero_width": ["\u200b", "\u200c", "\u200d", "\ufeff", "\u2060"],
    }
    out = list(VARIED_CORPUS)
    for i in range(30):
        n = rng.randint(1, 12)
        sentence = " ".join(rng.choice(words) for _ in range(n))
        out += [
            sentence + rng.choice([".", "!", "?", ""]),                                          # ASCII
            rng.choice(words) + " " * rng.randint(2, 40) + rng.choice(words) + " " * rng.randint(0, 5),  # runs
            "\t" * rng.randint(1, 6) + sentence + "\t" * rng.randint(0, 3),                     # tabs
            sentence.replace(" ", "\r\n", rng.randint(1, 3)) + "\r\n" * rng.randint(0, 2),      # CRLF
            f"def f{i}(x):\n{' ' * rng.choice([2, 4, 8])}return x * {rng.randint(0, 999)}  # {sentence}\n",  # code
            f"https://example.com/{rng.choice(words)}/{i}?q={sentence.replace(' ', '+')}&n={rng.randint(0, 99)}",
            " ".join(str(rng.randint(-10**9, 10**9)) for _ in range(rng.randint(1, 6))) + f" {rng.random():.6f}",
            "".join(rng.choice(pools["cjk"]) for _ in range(rng.randint(1, 30))),
            "".join(rng.choice(pools["korean"]) for _ in range(rng.randint(1, 20))),
            " ".join(rng.sample(pools["arabic"].split(), 3)),
            "".join(rng.choice(pools["accents"]) for _ in range(rng.randint(1, 12))) + " " + sentence,
            unicodedata.normalize("NFD", "".join(rng.choice(pools["accents"]) for _ in range(rng.randint(1, 8)))),
            "".join(rng.choice(pools["emoji"]) for _ in range(rng.randint(1, 6))) + " " + sentence,
            rng.choice(pools["zero_width"]).join(sentence.split(" ")),
        ]
    out += ["", " ", "\n", "word " * 900, "ab" * 2000]
    return out


CORPUS = varied_corpus()


def _manifest(tokenizer_dir: Path, arch: str, max_length: int, side: str) -> Manifest:
    """The manifest an export would write for a model carrying this tokenizer (its ids rules only)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    cfg = json.loads((tokenizer_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    pad = cfg.get("pad_token")
    pad = pad.get("content") if isinstance(pad, dict) else pad
    eos = tok.token_to_id("<|endoftext|>") if arch == "qwen3" else None
    return Manifest(arch=arch, weights="i2s", pooling="lasttoken", normalize=True, dimension=8, hidden_size=8,
                    max_length=max_length, padding_side=side, pad_token_id=tok.token_to_id(pad) if pad else 0,
                    append_eos_token_id=eos)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = customops.session_options(threads=1, extensions=True)
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _strings(texts) -> np.ndarray:
    return np.array(list(texts), dtype=object).reshape(-1)


def _graph_ids_match(pre: onnx.ModelProto, tokenizer: TextTokenizer, texts: list[str], batch: int = 16) -> None:
    session = _session(pre)
    for start in range(0, len(texts), batch):
        chunk = texts[start:start + batch]
        ids, mask = session.run(["input_ids", "attention_mask"], {"text": _strings(chunk)})
        want_ids, want_mask = tokenizer.encode(chunk)
        for row, text in enumerate(chunk):  # row by row: the failing text in the message
            assert ids[row].tolist() == want_ids[row].tolist() and mask[row].tolist() == want_mask[row].tolist(), \
                (text[:80], ids[row].tolist()[:40], want_ids[row].tolist()[:40])
        assert ids.shape == want_ids.shape, chunk


def test_corpus_is_varied():
    assert len(CORPUS) >= 300
    assert any(unicodedata.normalize("NFC", t) != t for t in CORPUS)  # NFD accents
    assert any(len(t) > 3000 for t in CORPUS) and "" in CORPUS


@pytest.mark.parametrize("max_length, side", [(512, "right"), (48, "left")])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_real_ids_equal_tokenizers(arch, max_length, side):
    """The real tokenizers: >= 300 texts in mixed-length batches, with truncation (48: most texts;
    512: the long ones) and either padding side. Qwen3 runs onnxruntime-extensions' tokenizer after our
    NormalizeNFC; Gemma3 our ByteFallbackBpe (the extensions' op drops a final one-character word and
    cuts runs of over 100 characters: docs/hosts.md)."""
    folder = real_tokenizer_dir(arch)
    manifest = _manifest(folder, arch, max_length, side)
    pre = text_input.preprocess_model(folder, manifest, 21, 10)
    ops = {n.op_type for n in pre.graph.node}
    assert ({"NormalizeNFC", "HfJsonTokenizer"} <= ops) if arch == "qwen3" else ("ByteFallbackBpe" in ops)
    _graph_ids_match(pre, TextTokenizer(folder / "tokenizer.json", manifest), CORPUS)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_factory_ids_equal_tokenizers(tiny_model, arch):
    """The factory's tokenizers: Gemma3's adds <eos> through its post-processor, which the tokenizer
    op leaves out; the graph adds it from tokenizer.json's special-token frame."""
    folder = tiny_model(arch)
    manifest = _manifest(folder, arch, 64, "left" if arch == "gemma3" else "right")
    _graph_ids_match(text_input.preprocess_model(folder, manifest, 21, 10),
                     TextTokenizer(folder / "tokenizer.json", manifest), CORPUS)


# -- exports ------------------------------------------------------------------------------------
def _models(tiny_model, arch):
    return tiny_model(arch, padding_side="left") if arch == "gemma3" else tiny_model(arch)


@pytest.fixture(scope="module")
def real_exports(tmp_path_factory):
    """Tiny BitNet models carrying the real tokenizers, exported with --text-input (built on first use)."""
    built = {}

    def get(arch: str) -> Path:
        if arch not in built:
            root = tmp_path_factory.mktemp(f"real-{arch}")
            model = make_real_tokenizer_model(root / "model", arch, dtype="float32")
            built[arch] = export(model, root / "onnx", text_input=True)
        return built[arch]
    return get


def _text_session(folder: Path):
    return create_session(folder, Manifest.read(folder), threads=1, text=True)


def _reference(folder: Path, texts, **kwargs) -> np.ndarray:
    """Embedder.encode on the folder's token-ids model (the Python tokenizer path: prepare and embed
    always take it, as for an export without --text-input)."""
    embedder = Embedder(folder, threads=1)
    return embedder.embed(embedder.prepare(list(texts), normalize=False, **kwargs))


MIXED = ["What is BitNet?", "Ternary weights make matrix products cheap: additions, no multiplications. " * 4,
         "", "café 東京 🙂", "a"]


@pytest.mark.parametrize("weights", ["i2s", "int8"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_strings_in_equals_embedder(tiny_model, tiny_export, arch, weights):
    """Single texts and a mixed-length batch, without a prompt (the manifest's default) and with one."""
    folder = tiny_export(_models(tiny_model, arch), weights=weights, text_input=True)
    manifest = Manifest.read(folder)
    assert manifest.text_model_file == TEXT_MODEL_NAME and manifest.needs_custom_ops == (weights == "i2s")
    session = _text_session(folder)
    for texts in ([MIXED[0]], [MIXED[1]], MIXED):
        got = session.run(["sentence_embedding"], {"text": _strings(texts)})[0]
        np.testing.assert_allclose(got, _reference(folder, texts), rtol=0, atol=ATOL)
        prompt = "Instruct: find the passage\nQuery: "
        got = session.run(["sentence_embedding"], {"text": _strings(texts), "prompt": _strings([prompt])})[0]
        np.testing.assert_allclose(got, _reference(folder, texts, prompt=prompt), rtol=0, atol=ATOL)
    named = next(iter(manifest.prompts))
    got = session.run(["sentence_embedding"], {"text": _strings(MIXED), "prompt": _strings([manifest.prompts[named]])})[0]
    np.testing.assert_allclose(got, _reference(folder, MIXED, prompt_name=named), rtol=0, atol=ATOL)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.slow
def test_real_tokenizer_strings_in_equals_embedder(real_exports, arch):
    folder = real_exports(arch)
    texts = CORPUS[:48]
    for prompt in (None, "query: "):
        feed = {"text": _strings(texts), **({"prompt": _strings([prompt])} if prompt else {})}
        got = _text_session(folder).run(["sentence_embedding"], feed)[0]
        np.testing.assert_allclose(got, _reference(folder, texts, prompt=prompt), rtol=0, atol=ATOL)


def test_default_prompt_is_the_graph_default(tiny_model):
    """The prompt input (ONNX optional type, no initializer of its name: ORT would warn on every load)
    defaults to the manifest's default prompt (default_prompt_name), else ""; a fed prompt replaces it."""
    model = tiny_model("qwen3")
    manifest = _manifest(model, "qwen3", 64, "right")
    manifest.prompts = {"query": "Query: ", "document": ""}
    tokenizer = TextTokenizer(model / "tokenizer.json", manifest)
    for name, want in ((None, ""), ("query", "Query: ")):
        manifest.default_prompt_name = name
        pre = text_input.preprocess_model(model, manifest, 21, 10)
        assert "prompt" not in {t.name for t in pre.graph.initializer}
        (prompt,) = [i for i in pre.graph.input if i.name == "prompt"]
        assert prompt.type.optional_type.elem_type.tensor_type.elem_type == onnx.TensorProto.STRING
        session = _session(pre)
        ids = session.run(["input_ids"], {"text": _strings(["x"])})[0][0].tolist()
        assert ids == tokenizer.tokenize([want + "x"])[0]
        fed = session.run(["input_ids"], {"text": _strings(["x"]), "prompt": _strings(["Doc: "])})[0][0].tolist()
        assert fed == tokenizer.tokenize(["Doc: x"])[0]


def test_embedder_feeds_texts_to_the_graph(tiny_model, tiny_export, monkeypatch):
    """Same API: encode through the in-graph tokenizer, token embeddings, run_batch."""
    import bitnet_onnx.runtime.embedder as module

    folder = tiny_export(tiny_model("qwen3"), text_input=True)
    made = []  # the text flag of each session the Embedder makes
    with monkeypatch.context() as m:
        m.setattr(module, "create_session", lambda *a, **k: made.append(k.get("text", False)) or create_session(*a, **k))
        embedder = Embedder(folder, threads=1)
    assert embedder.text_input and made == [True]  # the token-ids session only when first needed
    texts = MIXED + [unicodedata.normalize("NFD", "résumé naïve")]
    np.testing.assert_allclose(embedder.encode(texts), _reference(folder, texts), rtol=0, atol=ATOL)
    got = embedder.encode(texts, output_value="token_embeddings")
    input_ids, mask = embedder.prepare(texts).padded()  # the ids path's token embeddings, on a plain session
    (want,) = create_session(folder, Manifest.read(folder), threads=1).run(
        ["token_embeddings"], {"input_ids": input_ids, "attention_mask": mask})
    for a, b, keep in zip(got, want, mask):
        np.testing.assert_allclose(a, b[keep == 1], rtol=0, atol=ATOL)
    assert embedder.run_batch(embedder.tokenize(["abc", "a longer text"])).shape == (2, embedder.dimension)


def test_nfd_text_embeds_like_nfc(tiny_model, tiny_export):
    """Qwen's tokenizer.json normalizes to NFC: so does the graph (decomposed accents, Hangul jamo)."""
    folder = tiny_export(tiny_model("qwen3"), text_input=True)
    assert Manifest.read(folder).text_custom_ops == ["NormalizeNFC"]
    session = _text_session(folder)
    nfc = ["café naïve", "각", "Å"]
    nfd = [unicodedata.normalize("NFD", t) for t in nfc]
    assert nfd != nfc
    got, want = (session.run(["sentence_embedding"], {"text": _strings(t)})[0] for t in (nfd, nfc))
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


def test_bad_batches_are_defined(tiny_model, tiny_export):
    """An empty batch gives [0, dim]; one empty string is one text (the EOS, or BOS...)."""
    for arch in ARCHITECTURES:
        folder = tiny_export(_models(tiny_model, arch), text_input=True)
        session = _text_session(folder)
        out = session.run(["sentence_embedding", "input_ids"], {"text": _strings([])})
        assert out[0].shape == (0, Manifest.read(folder).dimension) and out[1].shape[0] == 0
        got = session.run(["sentence_embedding"], {"text": _strings([""])})[0]
        np.testing.assert_allclose(got, _reference(folder, [""]), rtol=0, atol=ATOL)
        assert np.isfinite(got).all()


@pytest.mark.parametrize("arch, ours, extensions", [("qwen3", ["NormalizeNFC"], True),
                                                    ("gemma3", ["ByteFallbackBpe"], False)])
def test_int8_text_model_needs_the_manifests_libraries(tiny_model, tiny_export, arch, ours, extensions):
    """An ORT-native variant's strings-in graph needs just what the manifest lists: our library for its
    text ops, onnxruntime-extensions' only for Qwen3's byte-level BPE; a missing one is a clear ORT error."""
    folder = tiny_export(_models(tiny_model, arch), weights="int8", text_input=True)
    manifest = Manifest.read(folder)
    assert (manifest.needs_custom_ops, manifest.text_custom_ops, manifest.text_needs_extensions) == (
        False, ours, extensions)
    options = customops.session_options(threads=1, extensions=extensions)
    session = ort.InferenceSession(str(folder / TEXT_MODEL_NAME), options, providers=["CPUExecutionProvider"])
    got = session.run(["sentence_embedding"], {"text": _strings(MIXED)})[0]
    np.testing.assert_allclose(got, _reference(folder, MIXED), rtol=0, atol=ATOL)
    missing = "HfJsonTokenizer" if extensions else ours[0]
    options = customops.session_options(threads=1, op_library=extensions)  # one library left out
    with pytest.raises(Exception, match=missing):
        ort.InferenceSession(str(folder / TEXT_MODEL_NAME), options, providers=["CPUExecutionProvider"])


def test_external_data_is_shared(tiny_model, tmp_path, monkeypatch):
    """Weights in model.onnx.data: model_text.onnx points at the same file instead of a copy."""
    monkeypatch.setattr(writer, "EXTERNAL_DATA_THRESHOLD", 0)
    folder = export(tiny_model("qwen3"), tmp_path / "out", text_input=True)
    data = folder / writer.EXTERNAL_DATA_NAME
    assert data.is_file()
    text_model = onnx.load(str(folder / TEXT_MODEL_NAME), load_external_data=False)
    external = [t for t in text_model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external and {e.value for t in external for e in t.external_data if e.key == "location"} == {data.name}
    inline = sum(len(t.raw_data) for t in text_model.graph.initializer)
    assert inline < data.stat().st_size / 10  # small constants only: the weights stay in the shared file
    got = _text_session(folder).run(["sentence_embedding"], {"text": _strings(MIXED)})[0]
    np.testing.assert_allclose(got, _reference(folder, MIXED), rtol=0, atol=ATOL)


def test_cli_flag(tiny_model, tmp_path, capsys):
    out = tmp_path / "cli"
    assert cli_main(["export", str(tiny_model("gemma3")), "-o", str(out), "--text-input"]) == 0
    manifest = Manifest.read(out)
    assert manifest.text_model_file == TEXT_MODEL_NAME and manifest.text_custom_ops == ["ByteFallbackBpe"]
    assert not manifest.text_needs_extensions
    assert (out / "model.onnx").is_file() and (out / TEXT_MODEL_NAME).is_file()


def test_unsupported_normalizer_is_refused(tiny_model, private_copy, tmp_path):
    model = private_copy(tiny_model("qwen3"))
    data = json.loads((model / "tokenizer.json").read_text(encoding="utf-8"))
    data["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}
    (model / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(BitnetOnnxError, match="normalizer 'Lowercase' is not applied"):
        export(model, tmp_path / "out", text_input=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_include_prompt_false(tiny_model, private_copy, tmp_path, arch):
    """A mean pooling that leaves the prompt out: the graph tokenizes the prompt alone too and feeds the
    model its token count (less one, as sentence-transformers counts), per text."""
    model = private_copy(_models(tiny_model, arch))
    config_file = model / "1_Pooling" / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config.update(pooling_mode_cls_token=False, pooling_mode_lasttoken=False, pooling_mode_mean_tokens=True,
                  include_prompt=False)
    config_file.write_text(json.dumps(config), encoding="utf-8")
    folder = export(model, tmp_path / "out", text_input=True)
    session = _text_session(folder)
    assert Embedder(folder, threads=1).pools_without_prompt
    for prompt in ("", "query: ", "Instruct: find the passage\nQuery: "):
        got = session.run(["sentence_embedding"], {"text": _strings(MIXED), "prompt": _strings([prompt])})[0]
        np.testing.assert_allclose(got, _reference(folder, MIXED, prompt=prompt), rtol=0, atol=ATOL)
    with_prompt = Embedder(folder, threads=1).encode(MIXED, prompt="query: ", normalize=False)
    np.testing.assert_allclose(with_prompt, _reference(folder, MIXED, prompt="query: "), atol=ATOL)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_bytes_that_are_not_utf8_fail_naming_the_guard(tiny_model, tiny_export, arch):
    """A text that is not UTF-8 fails the run with the guard's node name (docs/hosts.md); the session
    still embeds afterwards."""
    session = _text_session(tiny_export(_models(tiny_model, arch), text_input=True))
    for raw in (b"caf\xc3", b"\xff\xfe bad", b"\xed\xa0\x80"):  # truncated, not UTF-8, a surrogate
        with pytest.raises(Exception, match=re.escape(UTF8_GUARD_NAME)):
            session.run(["sentence_embedding"], {"text": np.array([b"fine", raw], dtype="S16")})
    assert session.run(["sentence_embedding"], {"text": _strings(["fine"])})[0].shape[0] == 1
