"""``bitnet-onnx serve``'s library: an OpenAI / TEI compatible embeddings server on FastAPI + uvicorn.

Requests from many clients are tokenized on arrival and queued (over the queue's limit they wait in
line, in arrival order, for a bounded time); one worker thread runs them through the ``Embedder``'s
session in length-sorted batches bounded by a token budget (``Batcher``), and each request's rows are
put back in order. Layout (along FastAPI's lines): ``schemas``, ``service``, ``routers``, ``handlers``,
``middleware``, assembled by ``app``; docs/serve.md. Needs the ``serve`` extra (fastapi, uvicorn, prometheus-client),
imported only when ``create_app`` / ``serve`` / ``listen`` are first used, so ``ServerConfig`` (and the
verb's --help) work without it.
"""

from bitnet_onnx.runtime.server.config import ServerConfig

_LAZY = {"create_app": "bitnet_onnx.runtime.server.app", "listen": "bitnet_onnx.runtime.server.runner",
         "serve": "bitnet_onnx.runtime.server.runner"}

__all__ = ["ServerConfig", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
