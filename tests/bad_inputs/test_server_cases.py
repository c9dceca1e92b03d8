"""The server's cases of the bad-input corpus (issue 23): ``bitnet-onnx serve`` as a subprocess on
127.0.0.1 under a burst of retrying clients, clients that go away, slow sockets, huge bodies, hostile
JSON, bad API keys, and SIGTERM with slow sockets and queued requests open.

Every server's log must hold no traceback. All traffic is bounded in count; every wait has a hang guard.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import select
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

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bitnet_onnx import Embedder  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ATOL = 1e-5
HANG_GUARD_S = 60
API_KEY = "corpus-key-0123456789"
BODY_LIMIT = 1 << 20
WORDS = "ternary weights spiders legs capital France quick brown fox lazy dog cosine vector".split()


class Server:
    """``python -m bitnet_onnx serve`` on a free loopback port, its stderr in a file."""

    def __init__(self, folder: Path, log: Path, *flags: str, env: dict | None = None):
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bitnet_onnx", "serve", str(folder), "--port", "0", "--threads", "1",
                 "--log-level", "warning", *flags],
                stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        deadline = time.monotonic() + HANG_GUARD_S
        while not (found := re.search(r"http://[\d.]+:\d+", log.read_text())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"serve did not start: {log.read_text()}")
            time.sleep(0.05)
        self.url = found.group()
        self.port = int(self.url.rsplit(":", 1)[1])
        while httpx.get(self.url + "/health", timeout=HANG_GUARD_S).status_code != 200:
            time.sleep(0.05)

    def metrics(self) -> dict[str, float]:
        """{sample name with its labels, e.g. 'bitnet_onnx_requests_total{route=/embed,status=200}': value}."""
        text = httpx.get(self.url + "/metrics", timeout=HANG_GUARD_S).text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
        return out

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(HANG_GUARD_S)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def check_log(self) -> None:
        text = self.log.read_text()
        assert "Traceback" not in text, text


@pytest.fixture
def start(serve_folder, tmp_path):
    """start(*flags, env=None) -> a Server, stopped (and its log checked) after the test."""
    servers = []

    def make(*flags, env=None):
        servers.append(Server(serve_folder, tmp_path / f"serve-{len(servers)}.log", *flags, env=env))
        return servers[-1]

    yield make
    for s in servers:
        s.kill()
        s.check_log()


def _text(rng: np.random.Generator, tag: str, words: int) -> str:
    return tag + " " + " ".join(rng.choice(WORDS, words))


# --- a burst of retrying clients: every request answered, none starved -----------------------------

def _bench_serve():
    """benchmarks/bench_serve.py, whose burst (plan, retrying clients, summary) this test runs small."""
    spec = importlib.util.spec_from_file_location("bench_serve", REPO / "benchmarks" / "bench_serve.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_burst_of_retrying_clients_gets_every_request_answered(start, serve_embedder, capsys):
    # 384 requests from 64 clients against a queue of 1024 tokens (a large request holds 1.5-3k, so it
    # enters only an empty queue): many wait in line or are refused at first; none may be refused six
    # times (the client gives up after 5 retries).
    bench = _bench_serve()
    server = start("--max-queue-tokens", "1024", "--max-batch-size", "8", "--max-line-wait", "2")
    outcomes = asyncio.run(bench.run_burst(server.url, bench.burst_plan(clients=64, per_client=6),
                                           timeout=HANG_GUARD_S))
    report = bench.burst_line(bench.burst_summary(outcomes))
    with capsys.disabled():
        print(f"\nburst: {report}")
    assert all(o.status == 200 for o in outcomes), report
    texts = sorted({t for o in outcomes for t in o.texts})
    want = dict(zip(texts, serve_embedder.encode(texts)))
    for o in outcomes:
        got = [d["embedding"] for d in o.body["data"]]
        np.testing.assert_allclose(got, [want[t] for t in o.texts], rtol=0, atol=ATOL)
    served = server.metrics()
    assert served["bitnet_onnx_line_duration_seconds_count"] > 0, "the burst never made a request wait in line"
    assert not any(k.startswith("bitnet_onnx_requests_total") and "status=5" in k for k in served)


# --- clients that go away ----------------------------------------------------------------------------

def _long_texts(client: int, n: int = 64) -> list[str]:
    rng = np.random.default_rng(1000 + client)
    return [_text(rng, f"gone{client}-{t}", 40) for t in range(n)]


async def _send_and_close(url: str, bodies: list[bytes], closed_when) -> None:
    """Sends each body as a request on its own socket, waits until ``closed_when()`` holds, closes them all."""
    host, port = url.removeprefix("http://").split(":")
    streams = []
    for body in bodies:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        streams.append(writer)
    await asyncio.gather(*(w.drain() for w in streams))
    deadline = time.monotonic() + HANG_GUARD_S
    while not await asyncio.to_thread(closed_when):
        assert time.monotonic() < deadline, "the server never admitted the requests"
        await asyncio.sleep(0.01)
    for w in streams:
        w.transport.abort()  # RST, as a killed client


def test_clients_that_go_away_have_their_texts_dropped(start):
    # 30 clients send 64 long texts each (batches of 64 run one after the other, 1920 texts in all)
    # and reset their sockets once the server has all of them: the server drops what is queued, stops
    # the run in progress and is idle again, with every text either embedded or counted as abandoned
    # (a request done before the reset was answered 200; every other one is given up, 499).
    server = start("--max-batch-size", "64", "--max-queue-tokens", "1000000", "--max-wait-ms", "1")
    bodies = [json.dumps({"input": _long_texts(c)}).encode() for c in range(30)]
    total = 30 * 64

    def all_in():  # every text queued, running or done
        m = server.metrics()
        return m["bitnet_onnx_queue_inputs"] + m["bitnet_onnx_running_inputs"] + m["bitnet_onnx_inputs_total"] == total

    asyncio.run(_send_and_close(server.url, bodies, all_in))
    deadline = time.monotonic() + HANG_GUARD_S
    # idle: no request but this metrics one, nothing queued, and the stopped run's texts counted (its
    # texts leave running_inputs only when the run has stopped: reading earlier raced with it)
    while ((m := server.metrics())["bitnet_onnx_requests_in_progress"] > 1 or m["bitnet_onnx_queue_inputs"]
           or m["bitnet_onnx_running_inputs"]):
        assert time.monotonic() < deadline, f"still busy: {m}"
        time.sleep(0.05)
    embedded, abandoned = m["bitnet_onnx_inputs_total"], m["bitnet_onnx_abandoned_inputs_total"]
    assert embedded + abandoned == total and abandoned > 0, (embedded, abandoned)
    gone = m.get("bitnet_onnx_requests_total{route=/v1/embeddings,status=499}", 0)
    answered = m.get("bitnet_onnx_requests_total{route=/v1/embeddings,status=200}", 0)  # done before the close
    assert gone + answered == 30 and gone > 0, (gone, answered)
    time.sleep(0.5)
    assert server.metrics()["bitnet_onnx_inputs_total"] == embedded  # nothing runs any more
    print(f"\nclients gone: {gone:.0f} requests given up ({answered:.0f} answered before the close), "
          f"{embedded:.0f} texts embedded, {abandoned:.0f} dropped, {m['bitnet_onnx_stopped_runs_total']:.0f} runs stopped")


# --- slow sockets, huge bodies, hostile JSON, API keys: one server --------------------------------------

@pytest.fixture(scope="module")
def keyed(serve_folder, tmp_path_factory):
    """A server whose API key comes from the environment, with a 1 MiB body limit."""
    s = Server(serve_folder, tmp_path_factory.mktemp("keyed") / "serve.log", "--max-body-bytes", str(BODY_LIMIT),
               "--max-inputs", "64", env={"BITNET_ONNX_API_KEY": API_KEY})
    yield s
    s.kill()
    s.check_log()


AUTH = {"Authorization": f"Bearer {API_KEY}"}
AUTH_HEADER = f"Authorization: Bearer {API_KEY}\r\n".encode()


def _embed_ok(url: str, embedder: Embedder, text: str) -> None:
    r = httpx.post(url + "/v1/embeddings", json={"input": [text], "encoding_format": "float"}, headers=AUTH,
                   timeout=HANG_GUARD_S)
    assert r.status_code == 200, r.text
    np.testing.assert_allclose(r.json()["data"][0]["embedding"], embedder.encode([text])[0], rtol=0, atol=ATOL)


def test_slow_sockets_do_not_stall_other_clients(keyed, serve_embedder):
    # 64 sockets trickle a request's headers and 16 more a body, a few bytes per round; meanwhile other
    # clients are answered, and once the slow ones close the server is as it was.
    slow_heads = [socket.create_connection(("127.0.0.1", keyed.port), timeout=HANG_GUARD_S) for _ in range(64)]
    slow_bodies = [socket.create_connection(("127.0.0.1", keyed.port), timeout=HANG_GUARD_S) for _ in range(16)]
    for s in slow_heads:
        s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")
    for s in slow_bodies:
        s.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n" + AUTH_HEADER + b"\r\n{\"inputs\": \"")
    try:
        for round_ in range(5):
            for s in slow_heads:
                s.sendall(b"X-Slow-%d: y\r\n" % round_)
            for s in slow_bodies:
                s.sendall(b"slow ")
            _embed_ok(keyed.url, serve_embedder, f"answered while slow sockets trickle, round {round_}")
        # the slow bodies are being read (one request each), beside this scrape
        assert keyed.metrics()["bitnet_onnx_requests_in_progress"] >= 1 + len(slow_bodies)
    finally:
        for s in slow_heads + slow_bodies:
            s.close()
    _embed_ok(keyed.url, serve_embedder, "answered after the slow sockets closed")


def _raw_request(port: int, head: bytes, body_chunks=(), chunk_pause: float = 0.0) -> bytes:
    """Sends ``head`` and the chunks on a fresh socket, stops sending once the server answers or closes;
    the answer's bytes (b"" if none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=HANG_GUARD_S) as s:
        s.sendall(head)
        for chunk in body_chunks:
            if select.select([s], [], [], chunk_pause)[0]:
                break  # answered (or closed) before the body ended
            try:
                s.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and len(answer.split(b"\r\n\r\n", 1)[1]) >= _content_length(answer):
                    break
        except ConnectionResetError:
            pass
        return answer


def _content_length(answer: bytes) -> int:
    found = re.search(rb"(?i)content-length: (\d+)", answer)
    return int(found.group(1)) if found else 0


def test_64_mib_bodies_are_refused_without_being_held(keyed, serve_embedder):
    rss_before = keyed.rss_kib()
    declared = _raw_request(keyed.port, b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            + AUTH_HEADER + b"Content-Length: %d\r\n\r\n" % (64 << 20),
                            (b"[" * 65536 for _ in range(1024)))
    assert declared.startswith(b"HTTP/1.1 413"), declared[:200]
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b"x" * (1 << 16))
    chunked = _raw_request(keyed.port, b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           + AUTH_HEADER + b"Transfer-Encoding: chunked\r\n\r\n", (chunk for _ in range(1024)))
    assert chunked == b"" or chunked.startswith(b"HTTP/1.1 413"), chunked[:200]  # answered, or cut off
    growth_mib = (keyed.rss_kib() - rss_before) / 1024
    assert growth_mib < 16, f"RSS grew by {growth_mib:.1f} MiB for two 64 MiB bodies (limit 1 MiB)"
    _embed_ok(keyed.url, serve_embedder, "answered after the huge bodies")


HOSTILE_JSON = {  # body -> words of the one-line 400
    "nested arrays": (b"[" * 100000 + b"]" * 100000, "not valid JSON (nested too deeply)"),
    "nested objects": (b'{"input":' * 50000 + b"1" + b"}" * 50000, "not valid JSON (nested too deeply)"),
    "a 5000-digit integer": (b'{"input":[' + b"9" * 5000 + b"]}", "not valid JSON (Exceeds the limit"),
    "an overflowing float": (b'{"input":[1e400]}', "input[0] is a number"),
    "NaN": (b'{"input":"x","dimensions":NaN}', "dimensions: Input should be a valid integer"),
    "a lone surrogate": (b'{"input":["ok","\\ud800"]}', "input[1] holds a lone surrogate (U+D800)"),
    "invalid UTF-8": (b'{"input":"\xff\xfe"}', "not valid JSON ('utf-8' codec can't decode"),
    "truncated": (b'{"input": ["a",', "not valid JSON"),
    "null": (b"null", "must be a JSON object"),
    "empty": (b"", "must be a JSON object"),
    "a string": (b'"input"', "must be a JSON object"),
    "a duplicate key (the last wins)": (b'{"input":"x","input":5}', "got an integer"),
    "300000 token ids": (b'{"input":[' + b",".join([b"1"] * 300000) + b"]}", "more than max_length"),
    "an object as input": (b'{"input":{"$ref":"#"}}', "got an object"),
    "65 inputs": (json.dumps({"input": ["x"] * 65}).encode(), "more than the limit of 64"),
    "a negative token id": (b'{"input":[[1,-1]]}', "outside the vocabulary"),
}


@pytest.mark.parametrize("case", list(HOSTILE_JSON))
def test_hostile_json_gets_one_line_400(keyed, case):
    body, words = HOSTILE_JSON[case]
    r = httpx.post(keyed.url + "/v1/embeddings", content=body, headers={**AUTH, "Content-Type": "application/json"},
                   timeout=HANG_GUARD_S)
    assert r.status_code == 400, r.text[:300]
    message = r.json()["error"]["message"]
    assert words in message and "\n" not in message, message
    assert httpx.get(keyed.url + "/health", timeout=HANG_GUARD_S).status_code == 200


def test_api_key_from_the_environment_and_bad_authorization_headers(keyed, serve_embedder):
    cmdline = Path(f"/proc/{keyed.proc.pid}/cmdline").read_bytes()
    assert API_KEY.encode() not in cmdline  # not in the process list
    body = {"input": "x"}
    bad = [{}, {"Authorization": "Bearer"}, {"Authorization": "Bearer " + API_KEY[:-1]},
           {"Authorization": "Bearer " + API_KEY + "0"}, {"Authorization": "Token " + API_KEY},
           {"Authorization": "Bearer " + "k" * 60000}, {"Authorization": b"Bearer \xff\xfe"}]
    for headers in bad:
        r = httpx.post(keyed.url + "/v1/embeddings", json=body, headers=headers, timeout=HANG_GUARD_S)
        assert r.status_code == 401, (str(headers)[:80], r.text[:200])
        assert r.json()["error"]["code"] == "invalid_api_key"
    r = httpx.post(keyed.url + "/embed", json={"inputs": "x"}, headers={"Authorization": "Bearer no"})
    assert r.status_code == 401 and r.json()["error_type"] == "Unauthorized"
    _embed_ok(keyed.url, serve_embedder, "the right key")
    assert httpx.get(keyed.url + "/metrics").status_code == 200  # open routes need no key


# --- SIGTERM with slow sockets, idle connections and queued requests open -----------------------------

def test_sigterm_with_slow_sockets_and_queued_requests_open(start, serve_embedder):
    # Queued requests wait for a fuller batch (up to 120 s); slow sockets and an idle keep-alive
    # connection must not hold the shutdown: in-flight requests finish, the server exits 0.
    server = start("--max-wait-ms", "120000", "--max-batch-size", "512", "--max-batch-tokens", "1000000")
    texts = [f"in flight at SIGTERM {i}" for i in range(8)]
    slow = [socket.create_connection(("127.0.0.1", server.port), timeout=HANG_GUARD_S) for _ in range(16)]
    for s in slow:
        s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n")
    idle = httpx.Client(base_url=server.url, timeout=HANG_GUARD_S)
    assert idle.get("/health").status_code == 200  # its connection stays open, idle

    async def load():
        async with httpx.AsyncClient(base_url=server.url, timeout=HANG_GUARD_S) as c:
            calls = [asyncio.ensure_future(c.post("/v1/embeddings", json={"input": [t], "encoding_format": "float"}))
                     for t in texts]
            deadline = time.monotonic() + HANG_GUARD_S
            while (await asyncio.to_thread(server.metrics))["bitnet_onnx_queue_inputs"] < len(texts):
                assert time.monotonic() < deadline, "the requests never queued"
                await asyncio.sleep(0.02)
            server.proc.send_signal(signal.SIGTERM)
            return await asyncio.gather(*calls)

    try:
        answers = asyncio.run(load())
        assert server.proc.wait(HANG_GUARD_S) == 0
    finally:
        idle.close()
        for s in slow:
            s.close()
    want = serve_embedder.encode(texts)
    for r, w in zip(answers, want):
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(r.json()["data"][0]["embedding"], w, rtol=0, atol=ATOL)
