"""``bitnet-onnx serve``'s library: an OpenAI / TEI compatible embeddings server on FastAPI + uvicorn.

Requests from many clients are tokenized on arrival and queued; one worker thread runs them through
the ``Embedder``'s session in length-sorted batches bounded by a token budget (``Batcher``), and each
request's rows are put back in order. Needs the ``serve`` extra (fastapi, uvicorn, prometheus-client);
nothing outside this package imports it.
"""

from bitnet_onnx.runtime.server.config import ServerConfig
from bitnet_onnx.runtime.server.app import create_app
from bitnet_onnx.runtime.server.runner import listen, serve

__all__ = ["ServerConfig", "create_app", "listen", "serve"]
