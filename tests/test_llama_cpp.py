"""Upstream llama.cpp (through llama-cpp-python) on the GGUF files convert-gguf writes.

Runs when ``llama_cpp`` is importable: llama-cpp-python builds llama.cpp from source at install
time (far over ten minutes on a 2-vCPU machine), so CI does not install it (docs/gguf.md).

The models are standard (non-BitNet) tiny Qwen3 and Gemma3 models with the real tokenizers:
upstream llama.cpp has no place for BitNet's per-projection norms. Gemma3 gets llama.cpp's fixed
layer pattern (every 6th layer full attention, query scale 1/sqrt(head_dim)).
"""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest

from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.convert_gguf.writer import convert
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.runtime.tokenization import TextTokenizer
from bitnet_onnx.testing.archs import TESTING_ARCHS
from bitnet_onnx.testing.real_tokenizers import VARIED_CORPUS, real_tokenizer_dir

llama_cpp = pytest.importorskip("llama_cpp")
TEXTS = ["Hello world", "The quick brown fox jumps over the lazy dog.",
         "A longer text, long enough that its tokens go past the sliding window of sixteen tokens: "
         "café, 東京, 42, https://example.com/a?b=1 and a tab\there.",
         "def embed(texts):\n    return [model(t) for t in texts]"]


@pytest.fixture(scope="module")
def models(tiny_model):
    """Each architecture's real-tokenizer shape with the hparams llama.cpp fixes (its testing record)."""
    return {arch: tiny_model(arch, bitnet=False, tokenizer=str(real_tokenizer_dir(arch)),
                             shape={**record.real_tokenizer_shape, **record.llama_cpp_shape})
            for arch, record in TESTING_ARCHS.items()}


@pytest.fixture(scope="module")
def gguf_files(models, tmp_path_factory):
    root = tmp_path_factory.mktemp("llama-cpp-gguf")
    return {(arch, outtype): convert(models[arch], root / f"{arch}-{outtype}.gguf", outtype, progress=False)
            for arch in models for outtype in ("f32", "f16")}


def _llama(path):
    return llama_cpp.Llama(model_path=str(path), embedding=True, n_ctx=512, n_batch=512, n_ubatch=512,
                           n_threads=1, verbose=False)


def _cos(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("outtype, threshold", [("f32", 0.9999), ("f16", 0.999)])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_llama_cpp_embeddings_match_the_f32_export(models, gguf_files, tiny_export, arch, outtype, threshold):
    ours = Embedder(tiny_export(models[arch], "f32")).encode(TEXTS)
    llm = _llama(gguf_files[(arch, outtype)])
    theirs = [llm.embed(text) for text in TEXTS]  # pooled by the GGUF's pooling type (qwen3 last, gemma3 mean)
    for text, a, b in zip(TEXTS, ours, theirs):
        assert np.shape(b) == a.shape and _cos(a, b) >= threshold, (arch, outtype, text, _cos(a, b))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_llama_cpp_token_ids_equal_ours(models, gguf_files, tiny_export, arch):
    """llama.cpp's tokenizer on our GGUF (its pre-tokenizer from tokenizer.ggml.pre, or SentencePiece
    with the GGUF's scores) gives the ids our runtime gives from tokenizer.json."""
    tokenizer = TextTokenizer.from_folder(tiny_export(models[arch], "f32"))
    llm = llama_cpp.Llama(model_path=str(gguf_files[(arch, "f32")]), vocab_only=True, verbose=False)
    for text in VARIED_CORPUS:  # tokenizer.json's ids plus the runtime's rule (Qwen3: <|endoftext|> appended)
        ours = tokenizer.encode_plain(text) + ([tokenizer.eos_id] if tokenizer.eos_id is not None else [])
        if _normalizes_nfc(models[arch]):  # llama.cpp has no NFC normalizer (Qwen's tokenizer.json has)
            text = unicodedata.normalize("NFC", text)
        assert llm.tokenize(text.encode("utf-8"), add_bos=True, special=False) == ours, (arch, repr(text[:50]))


def _normalizes_nfc(model) -> bool:
    normalizer = json.loads((model / "tokenizer.json").read_text(encoding="utf-8"))["normalizer"]
    return normalizer is not None and normalizer.get("type") == "NFC"


def test_bench_llama_cpp_variants(tmp_path, tiny_model):
    """bench's llama.cpp rows: convert-gguf's f16 file without BitNet's norms, and llama.cpp's TQ2_0 of it,
    each run by a bench worker."""
    import gguf

    from bitnet_onnx.bench.variants import build_variant
    from bitnet_onnx.bench.worker import Worker

    model = tiny_model("qwen3", dtype="bfloat16", shape={"hidden_size": 256, "intermediate_size": 512})  # K % 256 == 0
    expected = {"llama.cpp-f16": gguf.GGMLQuantizationType.F16, "llama.cpp-tq2_0": gguf.GGMLQuantizationType.TQ2_0}
    for name, qtype in expected.items():
        folder = build_variant(model, tmp_path / name, name)
        tensors = {t.name: t for t in gguf.GGUFReader(folder / "model.gguf").tensors}
        assert not any("_norm_in" in n for n in tensors) and "blk.0.attn_q.weight" in tensors
        assert tensors["blk.0.attn_q.weight"].tensor_type == qtype
        assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
        worker = Worker(name, folder, threads=1, runner="llama.cpp")
        try:
            assert worker.time_ms(2, 16) > 0 and worker.time_ms(4, 200) > 0  # the second widens the context
        finally:
            assert worker.close()["peak_rss_bytes"] > 0
