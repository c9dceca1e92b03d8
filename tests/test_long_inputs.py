"""Long inputs bounded by design (export/memory.py, runtime/memory.py).

- every default export serves its manifest's max_length: a 32768-token text embeds on each architecture,
  through a BitNet model's i2s export (EncoderAttention) and a plain model's f32 export from its HF
  folder, and the f32 export of its GGUF is the same graph, weights and ids (random-weight models of the
  real width and vocabulary, few layers: what is tested is the shapes); the stock attention, which would
  need hundreds of GiB there, gives way to ONNX Runtime's own attention kernels (``--attention ort``), so
  the default int8 export loads in a plain ``onnxruntime.InferenceSession``, and an explicit
  ``--attention onnx`` gets a max_length it serves;
- ``--attention ort`` equals the stock attention at the real widths;
- ``Embedder`` and the server's batcher cut batches by the export's activation bytes (the same vectors), as
  do the ``embed`` and ``serve`` verbs given ``--max-batch-memory``, and refuse in one line a text that
  alone exceeds the budget.
"""

from __future__ import annotations

import filecmp
import json
import logging
import logging.handlers
from pathlib import Path

import numpy as np
import onnx
import pytest
from integrations_support import plain_ort_session

from bitnet_onnx import customops
from bitnet_onnx.arch import ARCHITECTURES
from bitnet_onnx.cli import main
from bitnet_onnx.convert_gguf.writer import convert
from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.export.exporter import export
from bitnet_onnx.export.memory import longest_served, one_text_bytes
from bitnet_onnx.manifest import ACTIVATION_BUDGET_BYTES, EXTERNAL_DATA_NAME, MANIFEST_NAME, MODEL_NAME, Manifest
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.runtime.memory import BatchMemory, plan_batches
from bitnet_onnx.weights import open_source

LONG = 32768
LONG_TEXT = " ".join(f"word{i % 997} and more" for i in range(LONG))  # well over LONG tokens
BATCH_TEXTS = [f"text number {i} " * 20 for i in range(8)]  # the batch-cutting tests' texts
# a real-width, real-vocabulary model with as few layers as hold each layer kind (Gemma3: one sliding, one full)
FEW_LAYERS = {"qwen3": {"layers": 1}, "gemma3": {"layers": 2, "sliding_window_pattern": 2}}


@pytest.fixture(scope="module")
def long_exports(real_width_model, tmp_path_factory):
    """arch -> {"model": the HF folder (conftest's real_width_model), "hf": its default export, "gguf": the
    default export of its f32 GGUF}."""
    root = tmp_path_factory.mktemp("long")
    out = {}
    for arch in ARCHITECTURES:
        model = real_width_model(arch, bitnet=False, **FEW_LAYERS[arch])
        gguf = convert(model, root / f"{arch}.gguf", outtype="f32", pre_tokenizer="qwen2" if arch == "qwen3" else None,
                       progress=False)
        out[arch] = {"model": model, "hf": export(model, root / f"{arch}-hf"), "gguf": export(gguf, root / f"{arch}-gguf")}
    return out


@pytest.fixture(scope="module")
def stock_exports(long_exports, tmp_path_factory):
    """arch -> (the export of long_exports' model with an explicit ``--attention onnx``, the warnings it logged),
    made on first use: the stock attention's max_length test and its comparison with ``--attention ort`` share it."""
    made = {}

    def get(arch: str) -> tuple[Path, list[str]]:
        if arch not in made:
            handler, logger = logging.handlers.BufferingHandler(capacity=1 << 20), logging.getLogger("bitnet_onnx")
            level = logger.level
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)  # whatever an earlier test's CLI run left it at
            try:
                out = export(long_exports[arch]["model"], tmp_path_factory.mktemp(f"stock-{arch}") / "onnx",
                             attention_name="onnx")
            finally:
                logger.removeHandler(handler)
                logger.setLevel(level)
            made[arch] = out, [r.getMessage() for r in handler.buffer if r.levelno == logging.WARNING]
        return made[arch]

    return get


def _embed_longest(e: Embedder) -> np.ndarray:
    """The embedding of a text of the export's max_length tokens (a longer one, truncated)."""
    assert len(e.tokenize([LONG_TEXT])[0]) == e.manifest.max_length
    vector = e.encode(LONG_TEXT)
    assert vector.shape == (e.dimension,) and np.all(np.isfinite(vector)) and np.linalg.norm(vector) > 0
    return vector


def _same_export(a: Path, b: Path) -> None:
    """Exports ``a`` and ``b`` compute the same function: the same graph, weight bytes and manifest (but
    for the source it names), so one embedding of a text stands for both once their ids are equal."""
    assert onnx.load(str(a / MODEL_NAME), load_external_data=False) == \
        onnx.load(str(b / MODEL_NAME), load_external_data=False)
    assert filecmp.cmp(a / EXTERNAL_DATA_NAME, b / EXTERNAL_DATA_NAME, shallow=False)
    ma, mb = (json.loads((folder / MANIFEST_NAME).read_text()) for folder in (a, b))
    assert ma.pop("source_model") != mb.pop("source_model") and ma == mb


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.real_size
def test_default_exports_embed_a_32768_token_text(long_exports, arch):
    hf, gguf = long_exports[arch]["hf"], long_exports[arch]["gguf"]
    m = Manifest.read(hf)
    assert (m.weights, m.attention, m.max_length) == ("f32", "ort", LONG)  # stock would not fit
    assert not m.needs_custom_ops
    # The GGUF holds the same f32 model: its export is the same graph and weights, and its tokenizer
    # (rebuilt from the GGUF's vocabulary) gives the same ids, so the HF export's embedding is both's.
    _same_export(hf, gguf)
    embedders = Embedder(hf, threads=2), Embedder(gguf, threads=1)
    assert embedders[0].tokenize([LONG_TEXT]) == embedders[1].tokenize([LONG_TEXT])
    _embed_longest(embedders[0])


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.real_size
@pytest.mark.slow
def test_the_default_bitnet_export_embeds_a_32768_token_text(tmp_path, real_width_model, monkeypatch, arch):
    """What a BitNet checkpoint exports to by default, i2s with EncoderAttention at precision auto (the model
    test_claims shares), serves its max_length, run as a user's host runs it: auto resolved by the op library,
    not forced to f32 as in the rest of the suite (bf16 on AMX-BF16; only finiteness is asserted here)."""
    monkeypatch.delenv(customops.ATTENTION_PRECISION_ENV, raising=False)
    out = export(real_width_model(arch, **FEW_LAYERS[arch]), tmp_path / "i2s")
    m = Manifest.read(out)
    assert (m.weights, m.attention, m.max_length, m.needs_custom_ops) == ("i2s", "fused", LONG, True)
    assert m.attention_precision == "auto"
    _embed_longest(Embedder(out, threads=2))


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.real_size
def test_stock_attention_is_kept_to_a_length_it_serves(long_exports, stock_exports, arch):
    """An explicit --attention onnx at max_length 32768 would need >50 GiB: the export lowers max_length to
    the longest it serves in the budget and says so naming --attention fused; a text of that length embeds."""
    cfg = open_source(long_exports[arch]["model"]).cfg
    assert one_text_bytes(cfg, "onnx", LONG) > 50 * (1 << 30) > ACTIVATION_BUDGET_BYTES
    out, warnings_logged = stock_exports(arch)
    m = Manifest.read(out)
    served = longest_served(cfg, "onnx")
    assert m.attention == "onnx" and m.max_length == served < LONG
    assert one_text_bytes(cfg, "onnx", served) <= ACTIVATION_BUDGET_BYTES < one_text_bytes(cfg, "onnx", served + 1)
    assert any(f"max_length lowered from {LONG} to {served}" in w and "--attention fused" in w
               for w in warnings_logged)
    e = Embedder(out, threads=2)
    assert e.memory.texts_that_fit(served, 32) == 1  # one text of max_length fits the default budget
    _embed_longest(e)


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.real_size
@pytest.mark.slow
def test_the_default_int8_export_runs_on_plain_onnx_runtime_at_32768(tmp_path, long_exports, arch):
    """The variant for hosts without our op library (Java, C#, JS, mobile ORT builds): at max_length 32768
    its graph holds only ONNX Runtime's own ops, and a session with no options embeds a text of that length."""
    out = export(long_exports[arch]["model"], tmp_path / "int8", weights="int8")
    m = Manifest.read(out)
    assert (m.attention, m.max_length, m.needs_custom_ops, m.custom_ops) == ("ort", LONG, False, [])
    ids = np.array(Embedder(out).tokenize([LONG_TEXT]), np.int64)
    assert ids.shape == (1, LONG)
    vector = plain_ort_session(out / m.model_file).run(
        ["sentence_embedding"], {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    assert np.all(np.isfinite(vector)) and np.linalg.norm(vector) > 0


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.real_size
@pytest.mark.slow
def test_ort_attention_equals_the_stock_one_at_real_widths(long_exports, stock_exports, arch):
    """f32 exports of the real widths, a batch of mixed lengths (padded on the tokenizer's side, past
    Gemma3's window): the same vectors as the stock decomposition. The ORT side is the default export,
    which is f32 with ``--attention ort`` (test_default_exports_embed_a_32768_token_text)."""
    ort_export = long_exports[arch]["hf"]
    assert (Manifest.read(ort_export).weights, Manifest.read(ort_export).attention) == ("f32", "ort")
    stock_export, _ = stock_exports(arch)
    texts = [" ".join(f"word{i % 97} or {i}" for i in range(n)) for n in (300, 41, 1)]
    got, stock = (Embedder(folder, threads=2).encode(texts) for folder in (ort_export, stock_export))
    cos = (got * stock).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(stock, axis=-1))
    assert cos.min() >= 0.99999, cos
    np.testing.assert_allclose(got, stock, atol=2e-5)


def _count_runs(monkeypatch) -> list[int]:
    """Until the patch is undone, every session the runtime makes records the batch size of each run
    (watched where the session is made: an Embedder's session is private); the sizes, in order."""
    import bitnet_onnx.runtime.embedder as module

    sizes, create = [], module.create_session

    class Counting:
        def __init__(self, session):
            self._wrapped = session

        def run(self, outputs, feed, *args):
            sizes.append(len(feed["input_ids"]))
            return self._wrapped.run(outputs, feed, *args)

        def get_inputs(self):
            return self._wrapped.get_inputs()

    monkeypatch.setattr(module, "create_session", lambda *a, **k: Counting(create(*a, **k)))
    return sizes


def _runs(monkeypatch, folder, **kwargs) -> tuple[Embedder, list[int]]:
    """An Embedder of ``folder`` whose session records the batch size of each run."""
    with monkeypatch.context() as m:
        sizes = _count_runs(m)
        return Embedder(folder, **kwargs), sizes


def _width(folder) -> int:
    return max(len(x) for x in Embedder(folder).tokenize(BATCH_TEXTS))


def _three_texts_budget(folder) -> int:
    """max_batch_bytes for three of BATCH_TEXTS at their longest one's width."""
    return 3 * Manifest.read(folder).batch_bytes(1, _width(folder))


def _embed_by_request(app) -> np.ndarray:
    """BATCH_TEXTS embedded by one /v1/embeddings request to ``app``."""
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        r = client.post("/v1/embeddings", json={"model": "tiny", "input": BATCH_TEXTS})
        assert r.status_code == 200, r.text
        return np.array([d["embedding"] for d in r.json()["data"]])


def test_batches_are_cut_by_activation_bytes(tiny_model, tiny_export, monkeypatch):
    """Stock attention on a tiny model: a budget for three texts of the longest width makes runs of at
    most three, the same vectors as one run each; a budget below one text is a one-line error."""
    folder = tiny_export(tiny_model("qwen3", bitnet=False))
    whole = Embedder(folder).encode(BATCH_TEXTS, batch_size=1)
    m = Manifest.read(folder)
    assert m.attention == "onnx" and m.attention_bytes_per_token_pair > 0 and m.activation_bytes_per_token > 0
    e, sizes = _runs(monkeypatch, folder, max_batch_bytes=_three_texts_budget(folder))
    np.testing.assert_allclose(e.encode(BATCH_TEXTS, batch_size=32), whole, atol=1e-5)
    assert max(sizes) == 3 and sum(sizes) == len(BATCH_TEXTS)
    width = _width(folder)
    tight = Embedder(folder, max_batch_bytes=m.batch_bytes(1, width) - 1)
    with pytest.raises(BitnetOnnxError, match=rf"a text of {width} tokens needs .* over max_batch_bytes .*, or re-export with --attention ort \(no op library\) or fused$"):
        tight.encode(BATCH_TEXTS)
    with pytest.raises(BitnetOnnxError, match="max_batch_bytes must be a positive integer"):
        Embedder(folder, max_batch_bytes=0)


def test_the_server_cuts_batches_by_activation_bytes(tiny_model, tiny_export, monkeypatch):
    """The server's batcher plans with the Embedder's memory budget: eight texts of one request, queued
    together, run three at most under a budget for three (one run of eight without it), the same vectors."""
    from bitnet_onnx.runtime.server import ServerConfig, create_app

    folder = tiny_export(tiny_model("qwen3", bitnet=False))
    config = ServerConfig(model_name="tiny", max_batch_size=32)
    uncut, uncut_sizes = _runs(monkeypatch, folder)
    uncut_vectors = _embed_by_request(create_app(uncut, config))
    assert uncut_sizes == [len(BATCH_TEXTS)]  # the token and count caps alone take all eight in one run
    cut, cut_sizes = _runs(monkeypatch, folder, max_batch_bytes=_three_texts_budget(folder))
    np.testing.assert_allclose(_embed_by_request(create_app(cut, config)), uncut_vectors, atol=1e-5)
    assert max(cut_sizes) == 3 and sum(cut_sizes) == len(BATCH_TEXTS), cut_sizes


def test_plan_batches_without_a_cost_model_uses_counts_only(tiny_model, tiny_export):
    """An export from before the cost model (no manifest fields): the token budget alone, as before."""
    m = Manifest.read(tiny_export(tiny_model("qwen3", bitnet=False)))
    m.activation_bytes_per_token = m.attention_bytes_per_token_pair = None
    assert plan_batches([10] * 5, 4, 10 ** 6, BatchMemory(m, 1)) == [[0, 1, 2, 3], [4]]


def test_serve_refuses_a_text_over_the_memory_budget(tiny_model, tiny_export):
    """413 naming the input for a text that alone exceeds --max-batch-memory; shorter ones still embed."""
    from fastapi.testclient import TestClient

    from bitnet_onnx.runtime.server import ServerConfig, create_app

    folder = tiny_export(tiny_model("qwen3", bitnet=False))
    m = Manifest.read(folder)
    short, long = "a cat", "a cat sat on the mat " * 10
    e = Embedder(folder, max_batch_bytes=m.batch_bytes(1, len(Embedder(folder).tokenize([long])[0])) - 1)
    with TestClient(create_app(e, ServerConfig(model_name="tiny"))) as client:
        ok = client.post("/v1/embeddings", json={"model": "tiny", "input": [short]})
        assert ok.status_code == 200
        refused = client.post("/v1/embeddings", json={"model": "tiny", "input": [short, long]})
        assert refused.status_code == 413
        message = refused.json()["error"]["message"]
        assert message.startswith("input[1]: a text of") and "--attention ort (no op library) or fused" in message


def test_cli_max_batch_memory_is_checked(capsys, tiny_model, tiny_export):
    folder = tiny_export(tiny_model("qwen3", bitnet=False))
    assert main(["embed", str(folder), "a cat", "--max-batch-memory", "0"]) != 0
    err = capsys.readouterr().err
    assert "--max-batch-memory must be a positive number of GiB" in err and "Traceback" not in err


def _gib_for(budget_bytes: int) -> str:
    """--max-batch-memory's GiB for ``budget_bytes``: half a byte over, so the CLI's rounding down to
    whole bytes lands on it."""
    return repr((budget_bytes + 0.5) / (1 << 30))


def test_cli_max_batch_memory_cuts_embed_batches(capsys, tiny_model, tiny_export, monkeypatch):
    """``embed --max-batch-memory`` with room for three texts of the longest width: runs of at most three
    (one run of eight without it), the same vectors."""
    folder = tiny_export(tiny_model("qwen3", bitnet=False))
    budget = _three_texts_budget(folder)
    sizes = _count_runs(monkeypatch)

    assert main(["embed", str(folder), *BATCH_TEXTS]) == 0
    uncut = np.array(json.loads(capsys.readouterr().out))
    assert sizes == [len(BATCH_TEXTS)]
    sizes.clear()
    assert main(["embed", str(folder), *BATCH_TEXTS, "--max-batch-memory", _gib_for(budget)]) == 0
    np.testing.assert_allclose(np.array(json.loads(capsys.readouterr().out)), uncut, atol=1e-5)
    assert max(sizes) == 3 and sum(sizes) == len(BATCH_TEXTS), sizes


def test_cli_max_batch_memory_cuts_serve_batches(tiny_model, tiny_export, monkeypatch):
    """``serve --max-batch-memory`` reaches the server's batcher: the app the verb would serve (uvicorn
    stood in for by a test client) runs eight texts of one request at most three at a time, the same
    vectors as without the option."""
    import bitnet_onnx.runtime.server as server

    folder = tiny_export(tiny_model("qwen3", bitnet=False))
    budget = _three_texts_budget(folder)
    sizes = _count_runs(monkeypatch)
    answers = []

    def serve_one_request(app, sock, **kwargs):
        sock.close()
        answers.append(_embed_by_request(app))

    monkeypatch.setattr(server, "serve", serve_one_request)
    argv = ["serve", str(folder), "--port", "0", "--model-name", "tiny", "--max-batch-size", "32"]
    assert main(argv) == 0
    assert sizes == [len(BATCH_TEXTS)]
    sizes.clear()
    assert main([*argv, "--max-batch-memory", _gib_for(budget)]) == 0
    np.testing.assert_allclose(answers[1], answers[0], atol=1e-5)
    assert max(sizes) == 3 and sum(sizes) == len(BATCH_TEXTS), sizes
