"""What the routes share (``Service``: the embedder, the batcher, the metrics, the config; ``Service.embed``,
the one call a route embeds with) and the dependencies that hand it to them (``get_service``, ``require_key``)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import re
import time
from functools import partial
from typing import NamedTuple

import numpy as np
from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.precision import CALIBRATION_FILE, FLOAT32
from bitnet_onnx.runtime.embedder import Embedder, Prepared
from bitnet_onnx.runtime.server.batcher import Batcher, BatchFailed, Draining, QueueFull
from bitnet_onnx.runtime.server.config import ServerConfig
from bitnet_onnx.runtime.server.errors import CLIENT_GONE, OPENAI, ApiError
from bitnet_onnx.runtime.server.metrics import Metrics
from bitnet_onnx.runtime.server.stoppable import StoppableRuns

# output_dtype (Voyage AI's name and values) -> bitnet_onnx.precision's name
OUTPUT_DTYPES = {"float": FLOAT32, "int8": "int8", "uint8": "uint8", "binary": "binary", "ubinary": "ubinary"}
INLINE_TOKENIZE_CHARS = 8192  # bigger requests are tokenized on a worker thread, off the event loop
_ITEM_NAME = re.compile(r"^(texts|ids)\[")  # the tokenizer's names for a request's items


class Embedded(NamedTuple):
    vectors: np.ndarray  # the finished rows, in input order
    tokens: int  # token ids the request's items came to (prompt and specials included)


class Service:
    """The server's state. ``error_shapes``: route path -> error body shape; ``open_paths``: routes that
    need no API key and stay up while draining (probes and scrapers)."""

    def __init__(self, embedder: Embedder, config: ServerConfig, error_shapes: dict[str, str],
                 open_paths: frozenset[str]):
        if embedder.graph_precision != FLOAT32:
            raise BitnetOnnxError(f"{embedder.folder}: its graph outputs {embedder.graph_precision} embeddings "
                                  "(export --output-precision); serve a float32 export, which answers every "
                                  "output_dtype per request")
        self.embedder, self.config = embedder, config
        # int8 / uint8 ranges: serve --ranges, else the export's calibration file if any, read at start
        if config.ranges is not None or (embedder.folder / CALIBRATION_FILE).is_file():
            embedder.calibration(config.ranges)
        self.error_shapes, self.open_paths = error_shapes, open_paths
        self.metrics = Metrics()
        # The batcher stops a run whose clients all went away: an option of each run, the embedder untouched.
        runs = StoppableRuns()
        self.batcher = Batcher(lambda ids, lengths: embedder.run_batch(ids, lengths, run_options=runs.options),
                               embedder.dimension, config, self.metrics, runs=runs, memory=embedder.memory)
        self.created = int(time.time())
        self._key_digest = _digest(config.api_key) if config.api_key is not None else None

    def error_shape(self, path: str) -> str:
        return self.error_shapes.get(path, OPENAI)

    def check_key(self, authorization: str) -> None:
        if self._key_digest is None:
            return
        scheme, _, token = authorization.partition(" ")
        # Digests of equal length compared in constant time: neither content nor length leaks.
        if not hmac.compare_digest(_digest(token.strip()), self._key_digest) or scheme.lower() != "bearer":
            raise ApiError(401, "invalid or missing API key: send 'Authorization: Bearer <key>'",
                           code="invalid_api_key")

    def check_dimensions(self, dimensions: int | None) -> None:
        try:
            self.embedder.check_dimensions(dimensions)
        except BitnetOnnxError as e:
            raise ApiError(400, str(e), "dimensions") from None

    def output_precision(self, output_dtype, dimensions: int | None) -> tuple[str, object]:
        """(precision, its ranges) for a request's ``output_dtype`` at its width; a 422 naming the field
        for an unknown value, or int8 / uint8 without calibration ranges of that width."""
        if output_dtype is None:
            return FLOAT32, None
        if not isinstance(output_dtype, str) or output_dtype not in OUTPUT_DTYPES:
            raise ApiError(422, f"output_dtype must be one of {', '.join(OUTPUT_DTYPES)}, got "
                                f"{json.dumps(output_dtype)[:64]}", "output_dtype")
        width = dimensions or self.embedder.dimension
        try:
            return self.embedder.check_precision(OUTPUT_DTYPES[output_dtype], self.config.ranges, width)
        except BitnetOnnxError as e:
            raise ApiError(422, f"output_dtype {output_dtype}: {e}", "output_dtype") from None

    async def embed(self, request: Request, texts: list[str] | None = None, ids: list[list[int]] | None = None, *,
                    truncate: bool, prompt_name: str | None = None, dimensions: int | None = None,
                    normalize: bool | None = None, output_dtype=None, field: str = "input") -> Embedded:
        """A request's finished rows (Matryoshka, normalization, then the ``output_dtype``'s precision) and
        its token count, the one call a route embeds with. ``texts`` get the prompt (the manifest's
        default without ``prompt_name``), ``ids`` none; every fault is an ``ApiError`` naming its field
        (``field``: the body's name for the items), raised before anything of the request is queued.
        Given up as soon as the client disconnects (queued texts dropped, a run of only its texts stopped)."""
        self.check_dimensions(dimensions)
        precision, ranges = self.output_precision(output_dtype, dimensions)
        prepared = await self._prepare(texts, ids, truncate, prompt_name, dimensions, normalize, precision, ranges,
                                       field)
        rows = await self._batched(request, prepared.ids, prepared.prompt_length)
        out = self.embedder.finish(prepared, rows)
        self.metrics.output_vectors.labels(output_dtype or "float").inc(len(out))
        return Embedded(out, prepared.tokens)

    async def _prepare(self, texts: list[str] | None, ids: list[list[int]] | None, truncate: bool,
                       prompt_name: str | None, dimensions: int | None, normalize: bool | None, precision: str,
                       ranges, field: str) -> Prepared:
        """``Embedder.prepare`` of the request (tokenized on a worker thread when large); a bad item is a
        400 naming it, one that alone exceeds a run's memory budget a 413."""
        size = sum(len(x) for x in ids) if texts is None else sum(len(t) for t in texts)
        work = partial(self.embedder.prepare, texts, ids=ids, prompt_name=prompt_name, truncate=truncate,
                       dimensions=dimensions, normalize=normalize, precision=precision, ranges=ranges)
        try:
            prepared = work() if size <= INLINE_TOKENIZE_CHARS else await run_in_threadpool(work)
        except BitnetOnnxError as e:  # "texts[3] has ..." / "ids[0]: token id ..." / "prompt_name ..."
            message = _ITEM_NAME.sub(field + "[", str(e), count=1)
            raise ApiError(400, message, "prompt_name" if message.startswith("prompt_name") else field) from None
        counts = prepared.token_counts
        longest = max(range(len(counts)), key=lambda i: counts[i], default=None)
        if longest is not None:
            try:  # a text that alone exceeds the run's memory budget never reaches the batcher
                self.embedder.memory.texts_that_fit(counts[longest], 1)
            except BitnetOnnxError as e:
                raise ApiError(413, f"{field}[{longest}]: {e}", field) from None
        return prepared

    async def _batched(self, request: Request, ids: list[list[int]], prompt_length: int) -> np.ndarray:
        """The batcher's rows for ``ids``; given up (queued texts dropped, a run of only this client's
        texts stopped) as soon as the client disconnects."""
        work = asyncio.ensure_future(self.batcher.embed(ids, prompt_length))
        gone = asyncio.ensure_future(_disconnected(request.receive))
        try:
            await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (gone, work):
                task.cancel()  # a no-op on the finished one
        if not work.done() or work.cancelled():
            with contextlib.suppress(asyncio.CancelledError):
                await work
            raise ApiError(CLIENT_GONE, "the client closed the connection", code="client_gone")
        try:
            return work.result()
        except QueueFull as e:
            self.metrics.rejected.labels("queue_full").inc()
            raise ApiError(429, f"the server is busy ({e})", code="queue_full", retry_after=e.retry_after) from None
        except Draining:
            self.metrics.rejected.labels("shutting_down").inc()
            raise ApiError(503, "the server is shutting down", code="shutting_down", retry_after=1) from None
        except BatchFailed as e:
            raise ApiError(500, str(e)) from None


async def _disconnected(receive) -> None:
    """Returns once the client has gone (the body is already read, so the next message says so)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def get_service(request: Request) -> Service:
    return request.app.state.service


async def require_key(request: Request, service: Service = Depends(get_service)) -> None:
    """The API key check of every route but the open ones (async: FastAPI runs a sync one on a thread)."""
    service.check_key(request.headers.get("authorization", ""))


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()
