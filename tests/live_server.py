"""A server of bitnet_onnx.runtime.server on uvicorn in a thread of the test's process, on a free loopback
port: what test_serve.py and the OpenAI-compatible clients' tests (test_integrations_openai_compatible.py)
talk to. Import it after ``pytest.importorskip("fastapi")``: the server needs the serve extra."""

from __future__ import annotations

import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bitnet_onnx import Embedder
from bitnet_onnx.runtime.server import ServerConfig, create_app, listen, serve


class LiveServer:
    """The app serving the export in ``folder`` with ``ServerConfig(**options)``, up (its /health answers)
    once constructed; ``close`` stops it."""

    def __init__(self, folder, **options):
        self.config = ServerConfig(**options)
        self.app = create_app(Embedder(folder, threads=1), self.config)
        sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.thread = threading.Thread(target=serve, args=(self.app, sock), kwargs={"log_level": "warning"},
                                       daemon=True)
        self.thread.start()
        wait_healthy(self.url)

    def metrics(self) -> dict:
        return metrics(self.url)

    def close(self):
        self.app.state.uvicorn_server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive()


def wait_healthy(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not come up")
        time.sleep(0.05)


def metrics(url: str) -> dict:
    """{(sample name, frozenset(labels)): value} from /metrics, parsed by prometheus_client."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
