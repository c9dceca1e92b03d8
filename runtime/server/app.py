"""The FastAPI app: OpenAI's /v1/embeddings and /v1/models, TEI's /embed, /health and /metrics, assembled
from ``routers.ROUTERS`` (routes), ``service`` (their shared state), ``handlers`` (errors) and
``middleware`` (metrics, limits, draining).

Every request is checked whole (types, sizes, token ids, lengths) before any of it is queued, so a bad
request fails alone and never reaches a batch that holds other requests' texts.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from starlette.concurrency import run_in_threadpool

from bitnet_onnx.runtime.embedder import Embedder
from bitnet_onnx.runtime.server.config import ServerConfig
from bitnet_onnx.runtime.server.handlers import add_error_handlers
from bitnet_onnx.runtime.server.middleware import Guard
from bitnet_onnx.runtime.server.routers import ROUTERS
from bitnet_onnx.runtime.server.service import Service, require_key


def create_app(embedder: Embedder, config: ServerConfig) -> FastAPI:
    """The app serving ``embedder``; its batcher starts and stops with the app's lifespan."""
    routes = [route for api in ROUTERS for route in api.router.routes]  # label the metrics by their paths
    shapes = {path: api.error_shape for api in ROUTERS for path in api.paths}
    open_paths = frozenset(path for api in ROUTERS if api.open for path in api.paths)
    service = Service(embedder, config, shapes, open_paths)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        service.batcher.start()
        try:
            yield
        finally:  # uvicorn has already waited for in-flight requests; the queue is empty or abandoned
            await run_in_threadpool(service.batcher.stop, config.graceful_timeout_s)

    app = FastAPI(title="bitnet-onnx", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    for api in ROUTERS:
        app.include_router(api.router, dependencies=[] if api.open else [Depends(require_key)])
    service.metrics.add_routes(route.path for route in routes)
    app.add_middleware(Guard, service=service, routes=routes)
    add_error_handlers(app)
    return app
