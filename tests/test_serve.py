"""``bitnet-onnx serve`` on a live loopback server: the OpenAI client and TEI's /embed against
``Embedder.encode``, batching across 32 concurrent clients, every error case, back-pressure and a
SIGTERM during load (the real CLI in a subprocess)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

import live_server  # noqa: E402

from bitnet_onnx import Embedder  # noqa: E402
from bitnet_onnx.cli import main as cli_main  # noqa: E402
from bitnet_onnx.runtime.server import ServerConfig  # noqa: E402
from bitnet_onnx.runtime.server.batcher import Batcher, BatchFailed  # noqa: E402
from bitnet_onnx.runtime.server.metrics import Metrics  # noqa: E402

ATOL = 1e-5
TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "a",
    "What is the capital of France? Paris is the capital and largest city of France.",
    "Ternary weights",
    "Emoji and symbols: 🙂 🚀 ✓ → €",
    "How many legs does a spider have?",
]
API_KEY = "s3cret-key"
MAX_INPUTS = 64
MAX_BODY = 64 << 10


class LiveServer(live_server.LiveServer):
    """live_server's, with the tiny qwen3 model's name and this file's input and body limits unless given."""

    def __init__(self, folder, **options):
        super().__init__(folder, **{"model_name": "tiny-qwen3", "max_inputs": MAX_INPUTS, "max_body_bytes": MAX_BODY,
                                    **options})


def _sample(metrics: dict, name: str, **labels) -> float:
    return metrics.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def server(serve_folder):
    s = LiveServer(serve_folder, max_wait_ms=20)
    yield s
    s.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


# --- answers equal Embedder.encode ---------------------------------------------------------------------

def test_openai_client_single_and_batched_float(client, serve_embedder):
    one = client.embeddings.create(model="tiny-qwen3", input=TEXTS[2], encoding_format="float")
    np.testing.assert_allclose(one.data[0].embedding, serve_embedder.encode(TEXTS[2]), rtol=0, atol=ATOL)
    assert one.model == "tiny-qwen3" and len(one.data) == 1 and one.data[0].index == 0

    many = client.embeddings.create(model="tiny-qwen3", input=TEXTS, encoding_format="float")
    assert [d.index for d in many.data] == list(range(len(TEXTS)))
    got = np.array([d.embedding for d in many.data])
    np.testing.assert_allclose(got, serve_embedder.encode(TEXTS), rtol=0, atol=ATOL)
    tokens = sum(len(x) for x in serve_embedder.tokenize(TEXTS))
    assert many.usage.prompt_tokens == tokens and many.usage.total_tokens == tokens


def test_openai_client_base64_and_dimensions(client, serve_embedder):
    want = serve_embedder.encode(TEXTS, dimensions=16)
    raw = client.embeddings.create(model="m", input=TEXTS, encoding_format="base64", dimensions=16)
    got = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in raw.data])
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    # the client's default: it asks for base64 and decodes it itself
    default = client.embeddings.create(model="m", input=TEXTS, dimensions=16)
    np.testing.assert_allclose(np.array([d.embedding for d in default.data]), want, rtol=0, atol=ATOL)
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)  # renormalized after truncation


def test_openai_token_id_inputs(client, serve_embedder):
    ids = serve_embedder.tokenize(TEXTS[:3])
    single = client.embeddings.create(model="m", input=ids[0], encoding_format="float")
    np.testing.assert_allclose(single.data[0].embedding, serve_embedder.encode(TEXTS[0]), rtol=0, atol=ATOL)
    batch = client.embeddings.create(model="m", input=ids, encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in batch.data], serve_embedder.encode(TEXTS[:3]), rtol=0, atol=ATOL)
    assert batch.usage.prompt_tokens == sum(map(len, ids))
    # ids without the EOS the export appends for last-token pooling get it, as texts do
    no_eos = [x[:-1] for x in ids]
    again = client.embeddings.create(model="m", input=no_eos, encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in again.data], serve_embedder.encode(TEXTS[:3]), rtol=0, atol=ATOL)


def test_tei_embed(server, serve_embedder):
    def embed(**body):
        r = httpx.post(server.url + "/embed", json=body, timeout=30)
        assert r.status_code == 200, r.text
        return np.array(r.json(), dtype=np.float32)

    np.testing.assert_allclose(embed(inputs=TEXTS[0]), serve_embedder.encode([TEXTS[0]]), rtol=0, atol=ATOL)
    np.testing.assert_allclose(embed(inputs=TEXTS, dimensions=8, normalize=True),
                               serve_embedder.encode(TEXTS, dimensions=8, normalize=True), rtol=0, atol=ATOL)
    raw = embed(inputs=TEXTS, dimensions=8, normalize=False)
    np.testing.assert_allclose(raw, serve_embedder.encode(TEXTS, dimensions=8, normalize=False), rtol=0, atol=ATOL)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1)  # really not renormalized
    np.testing.assert_allclose(embed(inputs=TEXTS, prompt_name="query"),
                               serve_embedder.encode(TEXTS, prompt_name="query"), rtol=0, atol=ATOL)
    long = "spiders have eight legs " * 200  # over the export's max_length
    np.testing.assert_allclose(embed(inputs=[long], truncate=True), serve_embedder.encode([long]), rtol=0, atol=ATOL)


def test_big_requests_are_tokenized_and_serialized_off_the_event_loop(server, client, serve_embedder, monkeypatch):
    from bitnet_onnx.runtime.server import responses, service

    monkeypatch.setattr(service, "INLINE_TOKENIZE_CHARS", 0)  # every request counts as big
    monkeypatch.setattr(responses, "INLINE_JSON_VALUES", 0)
    want = serve_embedder.encode(TEXTS)
    got = client.embeddings.create(model="m", input=TEXTS, encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in got.data], want, rtol=0, atol=ATOL)
    got = client.embeddings.create(model="m", input=serve_embedder.tokenize(TEXTS))  # ids, base64
    np.testing.assert_allclose([d.embedding for d in got.data], want, rtol=0, atol=ATOL)
    r = httpx.post(server.url + "/embed", json={"inputs": TEXTS})
    np.testing.assert_allclose(r.json(), want, rtol=0, atol=ATOL)
    r = httpx.post(server.url + "/embed", json={"inputs": ["x", LONG]})
    assert r.status_code == 400 and "inputs[1] has" in r.json()["error"]


def test_pooling_that_leaves_the_prompt_out(tiny_model, tiny_export, tmp_path_factory):
    """include_prompt: false: each request's prompt length reaches the session, as in Embedder.encode."""
    model = Path(shutil.copytree(tiny_model("gemma3"), tmp_path_factory.mktemp("serve") / "gemma3-no-prompt"))
    pooling = model / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "include_prompt": False}))
    folder = tiny_export(model)
    e = Embedder(folder, threads=1)
    assert e.prompt_length(e.prompts["query"]) > 0
    s = LiveServer(folder)
    try:
        r = httpx.post(s.url + "/embed", json={"inputs": TEXTS, "prompt_name": "query"}, timeout=30)
        want = e.encode(TEXTS, prompt_name="query")
        np.testing.assert_allclose(r.json(), want, rtol=0, atol=ATOL)
        as_text = e.encode([e.prompts["query"] + t for t in TEXTS], prompt="")  # prompt pooled like text
        assert not np.allclose(want, as_text, atol=1e-3)
    finally:
        s.close()


def test_models_and_health(server, client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny-qwen3"] and models.data[0].owned_by == "bitnet-onnx"
    r = httpx.get(server.url + "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


# --- batching across concurrent clients --------------------------------------------------------------

def _mixed_requests(client_id: int, n: int) -> list[list[str]]:
    """Requests of 1 to 5 texts of very different lengths, unique per client and request."""
    rng = np.random.default_rng(client_id)
    words = "ternary weights spiders legs capital France quick brown fox lazy dog cosine vector".split()
    out = []
    for r in range(n):
        texts = []
        for t in range(int(rng.integers(1, 6))):
            length = int(rng.choice([1, 3, 12, 60]))
            texts.append(f"c{client_id} r{r} t{t} " + " ".join(rng.choice(words, length)))
        out.append(texts)
    return out


async def _run_clients(url: str, plans: list[list[list[str]]]) -> list[list[httpx.Response]]:
    async def one_client(plan):
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            return [await c.post("/v1/embeddings", json={"model": "m", "input": texts, "encoding_format": "float"})
                    for texts in plan]

    return await asyncio.gather(*(one_client(p) for p in plans))


def test_32_concurrent_clients_get_their_own_rows_in_order(server, serve_embedder):
    plans = [_mixed_requests(c, 20) for c in range(32)]
    all_texts = sorted({t for plan in plans for req in plan for t in req})
    want = dict(zip(all_texts, serve_embedder.encode(all_texts)))
    before = server.metrics()

    results = asyncio.run(_run_clients(server.url, plans))

    for plan, responses in zip(plans, results):
        assert len(responses) == len(plan)
        for texts, r in zip(plan, responses):
            assert r.status_code == 200, r.text
            data = r.json()["data"]
            assert [d["index"] for d in data] == list(range(len(texts)))
            np.testing.assert_allclose([d["embedding"] for d in data], [want[t] for t in texts], rtol=0, atol=ATOL)
    after = server.metrics()
    runs = _sample(after, "bitnet_onnx_batch_size_count") - _sample(before, "bitnet_onnx_batch_size_count")
    single = (_sample(after, "bitnet_onnx_batch_size_bucket", le="1.0")
              - _sample(before, "bitnet_onnx_batch_size_bucket", le="1.0"))
    texts = sum(len(req) for plan in plans for req in plan)
    assert runs - single > 0, "no batch held more than one text"
    assert runs < texts  # texts of different requests shared session runs
    assert (_sample(after, "bitnet_onnx_inputs_total") - _sample(before, "bitnet_onnx_inputs_total")) == texts
    served = (_sample(after, "bitnet_onnx_requests_total", route="/v1/embeddings", status="200")
              - _sample(before, "bitnet_onnx_requests_total", route="/v1/embeddings", status="200"))
    assert served == 32 * 20
    assert _sample(after, "bitnet_onnx_queue_duration_seconds_count") > 0
    assert _sample(after, "bitnet_onnx_request_duration_seconds_count", route="/v1/embeddings") >= 640


# --- errors ------------------------------------------------------------------------------------------

LONG = "spiders have eight legs " * 200  # more tokens than the tiny export's max_length (256)

OPENAI_ERRORS = [  # (body, status, param, words in the message)
    ({"model": "m", "input": []}, 400, "input", "must not be empty"),
    ({"model": "m", "input": ""}, 400, "input", "empty string"),
    ({"model": "m", "input": ["ok", ""]}, 400, "input", "input[1] is an empty string"),
    ({"model": "m", "input": [[]]}, 400, "input", "empty list of token ids"),
    ({"model": "m", "input": 5}, 400, "input", "got an integer"),
    ({"model": "m", "input": {"text": "x"}}, 400, "input", "got an object"),
    ({"model": "m", "input": None}, 400, "input", "got null"),
    ({"model": "m", "input": ["ok", 3]}, 400, "input", "input[1] is an integer, expected a string"),
    ({"model": "m", "input": [1, "a"]}, 400, "input", "input[1] is a string, expected an integer token id"),
    ({"model": "m", "input": [[1, 2], 3]}, 400, "input", "input[1] is an integer"),
    ({"model": "m", "input": [1, 2.5]}, 400, "input", "input[1] is a number"),
    ({"model": "m", "input": [True]}, 400, "input", "input[0] is a boolean"),
    ({"model": "m", "input": [[1, -1]]}, 400, "input", "input[0]: token id -1 is outside the vocabulary"),
    ({"model": "m", "input": [10 ** 9]}, 400, "input", "token id 1000000000 is outside the vocabulary"),
    ({"model": "m", "input": ["x"] * (MAX_INPUTS + 1)}, 400, "input", f"more than the limit of {MAX_INPUTS}"),
    ({"model": "m", "input": ["fine", LONG]}, 400, "input", "input[1] has"),
    ({"model": "m", "input": [list(range(1, 400))]}, 400, "input", "more than max_length 256"),
    ({"model": "m", "input": "x", "dimensions": 0}, 400, "dimensions", "from 1 to 128, got 0"),
    ({"model": "m", "input": "x", "dimensions": 129}, 400, "dimensions", "from 1 to 128"),
    ({"model": "m", "input": "x", "dimensions": "8"}, 400, "dimensions", "valid integer"),
    ({"model": "m", "input": "x", "encoding_format": "int8"}, 400, "encoding_format", "encoding_format"),
    ({"model": 3, "input": "x"}, 400, "model", "valid string"),
    ({"model": "m"}, 400, "input", "input: Field required"),
    ([1, 2], 400, None, "must be a JSON object"),
]


@pytest.mark.parametrize("body,status,param,words", OPENAI_ERRORS, ids=lambda x: None)
def test_openai_errors(server, body, status, param, words):
    r = httpx.post(server.url + "/v1/embeddings", json=body, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"], error["message"]
    assert "\n" not in error["message"]


TEI_ERRORS = [
    ({"inputs": []}, "inputs must not be empty"),
    ({"inputs": ""}, "inputs is an empty string"),
    ({"inputs": [1]}, "inputs[0] is an integer"),
    ({"inputs": ["ok", LONG]}, "inputs[1] has"),
    ({"inputs": ["ok", LONG], "truncate": False}, "more than max_length"),
    ({"inputs": "x", "prompt_name": "nope"}, "prompt_name 'nope'"),
    ({"inputs": "x", "normalize": "yes"}, "normalize"),
    ({"inputs": "x", "truncation_direction": "left"}, "only 'right'"),
    ({"inputs": "x", "dimensions": 500}, "from 1 to 128"),
]


@pytest.mark.parametrize("body,words", TEI_ERRORS, ids=lambda x: None)
def test_tei_errors_in_tei_shape(server, body, words):
    r = httpx.post(server.url + "/embed", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error_type"] == "Validation" and words in r.json()["error"], r.text


def test_malformed_json_wrong_route_and_method(server):
    r = httpx.post(server.url + "/v1/embeddings", content=b'{"input": ["a",', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.get(server.url + "/v1/embeddings")
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(server.url + "/v1/nothing", json={})
    assert r.status_code == 404 and "error" in r.json()


def test_oversized_bodies_get_413(server):
    body = json.dumps({"model": "m", "input": ["x" * 1000] * 80}).encode()  # ~80 KB > 64 KiB
    r = httpx.post(server.url + "/v1/embeddings", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

    def chunks():  # no Content-Length: the limit holds while reading
        for i in range(0, len(body), 8192):
            yield body[i:i + 8192]

    r = httpx.post(server.url + "/embed", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error_type"] == "Validation"
    assert httpx.get(server.url + "/health").status_code == 200


@pytest.fixture(scope="module")
def keyed(serve_folder):
    """A server with an API key that truncates long texts (--auto-truncate)."""
    s = LiveServer(serve_folder, api_key=API_KEY, auto_truncate=True)
    yield s
    s.close()


def test_api_key(keyed):
    body = {"model": "m", "input": "hello"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {API_KEY}"},
                    {"Authorization": f"Bearer {API_KEY}x"}, {"Authorization": "Bearer"}):
        r = httpx.post(keyed.url + "/v1/embeddings", json=body, headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.json()["error"]["code"] == "invalid_api_key" and r.headers["www-authenticate"] == "Bearer"
    r = httpx.post(keyed.url + "/embed", json={"inputs": "hello"})
    assert r.status_code == 401 and r.json()["error_type"] == "Unauthorized"
    assert httpx.get(keyed.url + "/v1/models").status_code == 401
    good = openai.OpenAI(base_url=keyed.url + "/v1", api_key=API_KEY, max_retries=0)
    assert len(good.embeddings.create(model="m", input="hello").data) == 1
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed.url + "/v1", api_key="nope", max_retries=0).embeddings.create(model="m", input="x")
    assert httpx.get(keyed.url + "/health").status_code == 200 and httpx.get(keyed.url + "/metrics").status_code == 200


def test_auto_truncate_and_tei_override(keyed, serve_embedder):
    client = openai.OpenAI(base_url=keyed.url + "/v1", api_key=API_KEY, max_retries=0)
    got = client.embeddings.create(model="m", input=["fine", LONG], encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in got.data], serve_embedder.encode(["fine", LONG]), rtol=0,
                               atol=ATOL)
    assert got.usage.prompt_tokens == len(serve_embedder.tokenize(["fine"])[0]) + serve_embedder.manifest.max_length
    headers = {"Authorization": f"Bearer {API_KEY}"}
    r = httpx.post(keyed.url + "/embed", json={"inputs": [LONG]}, headers=headers)
    np.testing.assert_allclose(r.json(), serve_embedder.encode([LONG]), rtol=0, atol=ATOL)
    r = httpx.post(keyed.url + "/embed", json={"inputs": [LONG], "truncate": False}, headers=headers)
    assert r.status_code == 400 and "inputs[0] has" in r.json()["error"]


def test_bad_requests_in_a_burst_leave_good_ones_correct(server, serve_embedder):
    good = [[f"good {i} " + "words " * (i % 7)] for i in range(24)]
    bad = [{"model": "m", "input": [[1, 10 ** 6]]}, {"model": "m", "input": ["ok", ""]},
           {"model": "m", "input": ["x", LONG]}, {"model": "m", "input": "x", "dimensions": -3}]
    want = serve_embedder.encode([t[0] for t in good])

    async def burst():
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            calls = [c.post("/v1/embeddings", json={"model": "m", "input": g, "encoding_format": "float"}) for g in good]
            calls[3:3] = [c.post("/v1/embeddings", json=b) for b in bad]
            return await asyncio.gather(*calls)

    responses = asyncio.run(burst())
    bad_responses = responses[3:3 + len(bad)]
    good_responses = responses[:3] + responses[3 + len(bad):]
    assert [r.status_code for r in bad_responses] == [400] * len(bad)
    for r, w in zip(good_responses, want):
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(r.json()["data"][0]["embedding"], w, rtol=0, atol=ATOL)


# The first request of the queue tests: a long max wait keeps it queued, and it fills the queue's token limit exactly.
FIRST_TEXTS = ["spiders have eight legs and most have eight eyes"] * 3


def _server_the_first_request_fills(folder, embedder, max_line_wait_s: float) -> LiveServer:
    limit = sum(len(x) for x in embedder.tokenize(FIRST_TEXTS))
    return LiveServer(folder, max_queue_tokens=limit, max_wait_ms=1500, max_batch_tokens=10 ** 6, max_batch_size=512,
                      max_line_wait_s=max_line_wait_s)


async def _post_until(c, s: LiveServer, texts: list[str], gauge: str, value: int) -> asyncio.Future:
    """The pending response to `texts` posted to /v1/embeddings, once the server's `gauge` reaches `value` (or the
    response has come)."""
    posted = asyncio.ensure_future(c.post("/v1/embeddings", json={"input": texts, "encoding_format": "float"}))
    while not posted.done() and _sample(s.metrics(), gauge) < value:
        await asyncio.sleep(0.01)
    return posted


def test_full_queue_answers_429_with_retry_after(serve_folder, serve_embedder):
    # With no wait in line, the requests after the first are refused at once.
    s = _server_the_first_request_fills(serve_folder, serve_embedder, max_line_wait_s=0)
    try:

        async def overflow():
            async with httpx.AsyncClient(base_url=s.url, timeout=60) as c:
                first = await _post_until(c, s, FIRST_TEXTS, "bitnet_onnx_queue_inputs", 3)
                second = await c.post("/v1/embeddings", json={"input": ["one more text for the queue"] * 2})
                third = await c.post("/embed", json={"inputs": ["one more text for the queue"] * 2})
                return await first, second, third

        first, second, third = asyncio.run(overflow())
        assert second.status_code == 429 and int(second.headers["retry-after"]) >= 1
        assert second.json()["error"]["type"] == "rate_limit_error" and second.json()["error"]["code"] == "queue_full"
        assert third.status_code == 429 and third.json()["error_type"] == "Overloaded"
        assert first.status_code == 200
        np.testing.assert_allclose([d["embedding"] for d in first.json()["data"]], serve_embedder.encode(FIRST_TEXTS),
                                   rtol=0, atol=ATOL)
        assert _sample(s.metrics(), "bitnet_onnx_rejected_requests_total", reason="queue_full") == 2
    finally:
        s.close()


def test_over_the_queue_limit_a_request_waits_in_line_and_is_answered(serve_folder, serve_embedder):
    # As above, but with time to wait in line: the second request waits until the first is taken off
    # the queue, then runs; no 429.
    second_texts = ["one more text for the line"] * 2
    s = _server_the_first_request_fills(serve_folder, serve_embedder, max_line_wait_s=30)
    try:

        async def over_the_limit():
            async with httpx.AsyncClient(base_url=s.url, timeout=60) as c:
                first = await _post_until(c, s, FIRST_TEXTS, "bitnet_onnx_queue_inputs", 3)
                second = await _post_until(c, s, second_texts, "bitnet_onnx_line_requests", 1)
                in_line = _sample(s.metrics(), "bitnet_onnx_line_requests")
                return await first, await second, in_line

        first, second, in_line = asyncio.run(over_the_limit())
        assert in_line == 1 and first.status_code == 200 and second.status_code == 200, second.text
        np.testing.assert_allclose([d["embedding"] for d in second.json()["data"]], serve_embedder.encode(second_texts),
                                   rtol=0, atol=ATOL)
        m = s.metrics()
        assert _sample(m, "bitnet_onnx_rejected_requests_total", reason="queue_full") == 0
        assert _sample(m, "bitnet_onnx_line_duration_seconds_count") == 1
    finally:
        s.close()


# --- the batcher alone: a text the session fails on fails only its own request ----------------------

POISON = 13


def test_session_failure_hits_only_the_request_at_fault():
    runs = []

    def run_batch(ids, prompt_lengths):
        runs.append(len(ids))
        assert prompt_lengths == [0] * len(ids)
        if any(POISON in x for x in ids):
            raise RuntimeError("bad token\nsecond line")
        return np.array([[float(sum(x)), float(len(x))] for x in ids], dtype=np.float32)

    batcher = Batcher(run_batch, 2, ServerConfig(model_name="m", max_wait_ms=200), Metrics())
    batcher.start()

    async def go():
        requests = [[[1, 2], [3]], [[4, POISON], [5, 6]], [[7, 8, 9]]]
        return await asyncio.gather(*(batcher.embed(r) for r in requests), return_exceptions=True)

    try:
        ok1, failed, ok2 = asyncio.run(go())
    finally:
        batcher.stop(5)
    np.testing.assert_array_equal(ok1, [[3, 2], [3, 1]])
    np.testing.assert_array_equal(ok2, [[24, 3]])
    assert isinstance(failed, BatchFailed) and str(failed) == "inference failed: bad token"
    assert runs[0] == 5  # all five texts went into one batch first


# --- the command: SIGTERM during load, startup errors, imports ----------------------------------------

def _start_cli(folder, *flags) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "bitnet_onnx", "serve", str(folder), "--port", "0",
                             "--threads", "1", "--log-level", "warning", *flags],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    deadline, line = time.monotonic() + 60, b""
    while b"\n" not in line:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if not ready or proc.poll() is not None:
            proc.kill()
            raise AssertionError(f"serve did not start: {line!r}")
        line += os.read(proc.stderr.fileno(), 4096)
    url = re.search(rb"http://[\d.]+:\d+", line).group().decode()
    return proc, url


def test_sigterm_during_load_finishes_in_flight_requests_and_exits_0(serve_folder, serve_embedder):
    # Requests wait in the queue for a fuller batch (up to 120 s), so they are surely in flight at SIGTERM;
    # they complete within the client's 30 s timeout only if the signal makes the worker stop waiting.
    proc, url = _start_cli(serve_folder, "--max-wait-ms", "120000", "--max-batch-size", "512",
                           "--max-batch-tokens", "1000000")
    try:
        live_server.wait_healthy(url)
        plans = [_mixed_requests(100 + c, 1)[0] for c in range(16)]
        want = {t: v for plan in plans for t, v in zip(plan, serve_embedder.encode(plan))}
        queued = sum(len(p) for p in plans)

        async def load():
            async with httpx.AsyncClient(base_url=url, timeout=30) as c:
                in_flight = [asyncio.ensure_future(c.post("/v1/embeddings", json={"input": p, "encoding_format": "float"}))
                             for p in plans]
                while _sample(live_server.metrics(url), "bitnet_onnx_queue_inputs") < queued:
                    assert not any(t.done() for t in in_flight), "a request ended before the signal"
                    await asyncio.sleep(0.02)
                proc.send_signal(signal.SIGTERM)
                done = await asyncio.gather(*in_flight)
                try:  # after the signal: refused (503) or no longer listening, never silently dropped
                    late = (await c.post("/v1/embeddings", json={"input": "late"})).status_code
                except httpx.TransportError:
                    late = "closed"
                return done, late

        done, late = asyncio.run(load())
        for plan, r in zip(plans, done):
            assert r.status_code == 200, r.text
            np.testing.assert_allclose([d["embedding"] for d in r.json()["data"]], [want[t] for t in plan],
                                       rtol=0, atol=ATOL)
        assert late in (503, "closed")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_errors_are_one_line(tmp_path, serve_folder, capsys):
    assert cli_main(["serve", str(tmp_path / "nowhere"), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bitnet-onnx serve: error:") and "nowhere" in err and err.count("\n") == 1
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli_main(["serve", str(serve_folder), "--port", str(port), "--threads", "1"]) == 1
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and err.count("\n") == 1
    assert cli_main(["serve", str(serve_folder), "--max-batch-tokens", "0"]) == 1
    assert "max_batch_tokens must be a positive integer" in capsys.readouterr().err
    assert cli_main(["serve", str(serve_folder), "--max-line-wait", "nan"]) == 1
    assert "max_line_wait_s must be a finite number >= 0, got nan" in capsys.readouterr().err


def test_the_rest_of_the_package_does_not_import_fastapi():
    code = ("import sys, bitnet_onnx, bitnet_onnx.runtime, bitnet_onnx.cli, bitnet_onnx.commands.serve; "
            "bitnet_onnx.cli.build_parser(['serve']); "
            "print(sorted(m for m in ('fastapi', 'uvicorn', 'prometheus_client') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
