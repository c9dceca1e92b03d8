"""The FastAPI app: OpenAI's /v1/embeddings and /v1/models, TEI's /embed, /health and /metrics.

Every request is checked whole (types, sizes, token ids, lengths) before any of it is queued, so a bad
request fails alone and never reaches a batch that holds other requests' texts.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import time
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Literal

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.runtime.server.batcher import Batcher, BatchFailed, Draining, QueueFull
from bitnet_onnx.runtime.server.config import ServerConfig
from bitnet_onnx.runtime.server.errors import ApiError, error_body
from bitnet_onnx.runtime.server.inputs import parse_openai_input, parse_tei_inputs
from bitnet_onnx.runtime.server.metrics import Metrics

log = logging.getLogger("bitnet_onnx.serve")

ROUTES = ("/v1/embeddings", "/v1/models", "/embed", "/health", "/metrics")
OPEN_ROUTES = ("/health", "/metrics")  # no API key: probes and scrapers
_ITEM_NAME = re.compile(r"^(texts|ids)\[")  # the tokenizer's names for a request's items
_INLINE_TOKENIZE_CHARS = 8192  # bigger requests are tokenized on a worker thread, off the event loop
_INLINE_JSON_VALUES = 1 << 16  # bigger answers are serialized on a worker thread


class EmbeddingsRequest(BaseModel):
    """OpenAI's POST /v1/embeddings body (``model`` and ``user`` are accepted and not used)."""
    model_config = ConfigDict(extra="allow")
    input: Any
    model: StrictStr | None = None
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: StrictInt | None = None
    user: StrictStr | None = None


class EmbedRequest(BaseModel):
    """TEI's POST /embed body."""
    model_config = ConfigDict(extra="allow")
    inputs: Any
    normalize: StrictBool = True
    truncate: StrictBool | None = None
    truncation_direction: Literal["right", "Right", "left", "Left"] = "right"
    prompt_name: StrictStr | None = None
    dimensions: StrictInt | None = None


class Service:
    """What the routes share: the embedder, the batcher, the metrics and the config."""

    def __init__(self, embedder: Embedder, config: ServerConfig):
        self.embedder, self.config = embedder, config
        self.metrics = Metrics()
        self.batcher = Batcher(embedder.run_batch, embedder.dimension, config, self.metrics)
        self.created = int(time.time())
        self._key_digest = _digest(config.api_key) if config.api_key is not None else None

    async def check_key(self, request: Request) -> None:  # async: FastAPI would run a sync one on a thread
        if self._key_digest is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        # Digests of equal length compared in constant time: neither content nor length leaks.
        if not hmac.compare_digest(_digest(token.strip()), self._key_digest) or scheme.lower() != "bearer":
            raise ApiError(401, "invalid or missing API key: send 'Authorization: Bearer <key>'",
                           code="invalid_api_key")

    def check_dimensions(self, dimensions: int | None) -> None:
        dim = self.embedder.dimension
        if dimensions is not None and not 1 <= dimensions <= dim:
            raise ApiError(400, f"dimensions must be from 1 to {dim}, got {dimensions}", "dimensions")

    async def token_ids(self, texts: list[str] | None, ids: list[list[int]] | None, truncate: bool,
                        prompt_name: str | None = None, field: str = "input") -> tuple[list[list[int]], int]:
        """(token ids by the export's rules, the prompt's length for the pooling); a bad item is a 400
        naming it. Texts get the prompt (the manifest's default without ``prompt_name``); ids none."""
        try:
            if texts is None:
                work = partial(self.embedder.tokenizer.prepare_ids, ids, truncate=truncate)
                size, prompt_length = sum(len(x) for x in ids), 0
            else:
                work = partial(self.embedder.tokenize, texts, prompt_name=prompt_name, truncate=truncate)
                size = sum(len(t) for t in texts)
                prompt_length = self.embedder.prompt_length(self.embedder.resolve_prompt(prompt_name))
            token_ids = work() if size <= _INLINE_TOKENIZE_CHARS else await run_in_threadpool(work)
        except BitnetOnnxError as e:  # "texts[3] has ..." / "ids[0]: token id ..." / "prompt_name ..."
            message = _ITEM_NAME.sub(field + "[", str(e), count=1)
            raise ApiError(400, message, "prompt_name" if message.startswith("prompt_name") else field) from None
        return token_ids, prompt_length

    async def embed(self, ids: list[list[int]], prompt_length: int) -> np.ndarray:
        try:
            return await self.batcher.embed(ids, prompt_length)
        except QueueFull as e:
            self.metrics.rejected.labels("queue_full").inc()
            raise ApiError(429, f"the server is busy ({e})", code="queue_full", retry_after=e.retry_after) from None
        except Draining:
            self.metrics.rejected.labels("shutting_down").inc()
            raise ApiError(503, "the server is shutting down", code="shutting_down", retry_after=1) from None
        except BatchFailed as e:
            raise ApiError(500, str(e)) from None


def create_app(embedder: Embedder, config: ServerConfig) -> FastAPI:
    """The app serving ``embedder``; its batcher starts and stops with the app's lifespan."""
    service = Service(embedder, config)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.batcher.start()
        try:
            yield
        finally:  # uvicorn has already waited for in-flight requests; the queue is empty or abandoned
            await run_in_threadpool(service.batcher.stop, config.graceful_timeout_s)

    app = FastAPI(title="bitnet-onnx", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.add_middleware(_Guard, service=service)
    _add_error_handlers(app)
    auth = Depends(service.check_key)

    @app.post("/v1/embeddings", dependencies=[auth])
    async def openai_embeddings(body: EmbeddingsRequest):
        texts, ids = parse_openai_input(body.input, config.max_inputs)
        service.check_dimensions(body.dimensions)
        token_ids, prompt_length = await service.token_ids(texts, ids, truncate=config.auto_truncate)
        out = embedder.finish(await service.embed(token_ids, prompt_length), dimensions=body.dimensions)
        tokens = sum(len(x) for x in token_ids)
        return await _respond(_openai_body, out, body.encoding_format or "float", tokens, config.model_name)

    @app.get("/v1/models", dependencies=[auth])
    async def openai_models():
        model = {"id": config.model_name, "object": "model", "created": service.created, "owned_by": "bitnet-onnx"}
        return _json({"object": "list", "data": [model]})

    @app.post("/embed", dependencies=[auth])
    async def tei_embed(body: EmbedRequest):
        texts = parse_tei_inputs(body.inputs, config.max_inputs)
        if body.truncation_direction.lower() != "right":
            raise ApiError(400, "truncation_direction: only 'right' is supported", "truncation_direction")
        service.check_dimensions(body.dimensions)
        truncate = config.auto_truncate if body.truncate is None else body.truncate
        token_ids, prompt_length = await service.token_ids(texts, None, truncate=truncate,
                                                           prompt_name=body.prompt_name, field="inputs")
        rows = await service.embed(token_ids, prompt_length)
        return await _respond(_tei_body, embedder.finish(rows, dimensions=body.dimensions, normalize=body.normalize))

    @app.get("/health")
    async def health():
        if service.batcher.draining:
            raise ApiError(503, "the server is shutting down", code="shutting_down", retry_after=1)
        return _json({"status": "ok"})

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _add_error_handlers(app: FastAPI) -> None:
    def respond(request: Request, error: ApiError) -> Response:
        return Response(error_body(request.url.path, error), status_code=error.status,
                        media_type="application/json", headers=error.headers())

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError):
        return respond(request, e)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, e: RequestValidationError):
        return respond(request, _validation_error(e))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        return respond(request, ApiError(e.status_code, str(e.detail)))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception):
        log.exception("bitnet-onnx serve: unexpected error on %s", request.url.path)
        return respond(request, ApiError(500, f"internal error: {type(e).__name__}"))


def _validation_error(e: RequestValidationError) -> ApiError:
    """pydantic's first complaint as one line naming the field."""
    errors = e.errors()
    if not errors:
        return ApiError(400, "invalid request body")
    first = errors[0]
    if first.get("type") == "json_invalid":
        return ApiError(400, "the request body is not valid JSON")
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    field = loc[0] if loc else None
    if not loc:
        return ApiError(400, "the request body must be a JSON object")
    return ApiError(400, f"{'.'.join(loc)}: {first.get('msg', 'invalid value')}", field)


def _openai_body(out: np.ndarray, encoding_format: str, tokens: int, model: str) -> bytes:
    if encoding_format == "base64":
        vectors = [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in out]
    else:
        vectors = out.tolist()
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    body = {"object": "list", "data": data, "model": model, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    return json.dumps(body, separators=(",", ":")).encode()


def _tei_body(out: np.ndarray) -> bytes:
    return json.dumps(out.tolist(), separators=(",", ":")).encode()


async def _respond(make_body, out: np.ndarray, *args) -> Response:
    """A JSON response of ``make_body(out, *args)``; large ones are serialized off the event loop."""
    body = make_body(out, *args) if out.size <= _INLINE_JSON_VALUES else await run_in_threadpool(make_body, out, *args)
    return Response(body, media_type="application/json")


def _json(value) -> Response:
    return Response(json.dumps(value, separators=(",", ":")).encode(), media_type="application/json")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


class _Guard:
    """ASGI middleware around every request: metrics, 503 while draining, and the body size limit (413),
    enforced while reading so an oversized body is never held whole."""

    def __init__(self, app, service: Service):
        self.app, self.service = app, service

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        m, path = self.service.metrics, scope["path"]
        route = path if path in ROUTES else "other"
        status = [500]

        async def send_tracked(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        start = time.monotonic()
        m.in_progress.inc()
        try:
            if self.service.batcher.draining and path not in OPEN_ROUTES:
                await self._refuse(send_tracked, path, ApiError(503, "the server is shutting down",
                                                                code="shutting_down", retry_after=1))
                return
            if scope["method"] in ("POST", "PUT", "PATCH"):
                body = await self._read_body(scope, receive)
                if body is None:
                    limit = self.service.config.max_body_bytes
                    await self._refuse(send_tracked, path, ApiError(
                        413, f"the request body is larger than the limit of {limit} bytes", code="body_too_large"))
                    return
                receive = _replay(body, receive)
            await self.app(scope, receive, send_tracked)
        finally:
            m.in_progress.dec()
            m.requests.labels(route, str(status[0])).inc()
            m.latency.labels(route).observe(time.monotonic() - start)

    async def _read_body(self, scope, receive) -> bytes | None:
        """The whole body, or None when it is over the limit (by Content-Length or while reading)."""
        limit = self.service.config.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away; the app sees an empty body
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    @staticmethod
    async def _refuse(send, path: str, error: ApiError) -> None:
        headers = [(b"content-type", b"application/json")]
        headers += [(k.lower().encode(), v.encode()) for k, v in error.headers().items()]
        body = error_body(path, error)
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive):
    """A receive() that gives the app the body already read, then defers to the client's connection."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
