"""JSON responses; large ones are serialized on a worker thread so the event loop keeps serving."""

from __future__ import annotations

import json
from typing import Callable

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

INLINE_JSON_VALUES = 1 << 16  # answers with more values are serialized on a worker thread


def dumps(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def json_response(value) -> Response:
    return Response(dumps(value), media_type="application/json")


async def rows_response(make_body: Callable[..., bytes], rows: np.ndarray, *args) -> Response:
    """A JSON response of ``make_body(rows, *args)``, off the event loop when ``rows`` is large."""
    if rows.size <= INLINE_JSON_VALUES:
        body = make_body(rows, *args)
    else:
        body = await run_in_threadpool(make_body, rows, *args)
    return Response(body, media_type="application/json")
