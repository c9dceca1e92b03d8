"""ASGI middleware around every request (``Guard``): metrics labelled by the matched route, 503 while
draining, and the body size limit (413), enforced while reading so an oversized body is never held whole."""

from __future__ import annotations

import time

from starlette.routing import Match

from bitnet_onnx.runtime.server.errors import ApiError, error_body
from bitnet_onnx.runtime.server.service import Service

OTHER_ROUTE = "other"  # the label of requests no route matched (404s)


def route_label(scope, routes) -> str:
    """The path template of the route this request is for (the one the router recorded in the scope,
    else the first of ``routes`` whose path matches: requests refused before routing), else OTHER_ROUTE.
    A path match with the wrong method (405) counts as the route's."""
    route = scope.get("route")
    if route is None:
        route = next((r for r in routes if r.matches(scope)[0] is not Match.NONE), None)
    return getattr(route, "path", None) or OTHER_ROUTE


class Guard:
    """``routes``: the app's routes, whose path templates label the metrics."""

    def __init__(self, app, service: Service, routes):
        self.app, self.service, self.routes = app, service, routes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        m, path = self.service.metrics, scope["path"]
        status = [500]

        async def send_tracked(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        start = time.monotonic()
        m.in_progress.inc()
        try:
            if self.service.batcher.draining and path not in self.service.open_paths:
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
            route = route_label(scope, self.routes)
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

    async def _refuse(self, send, path: str, error: ApiError) -> None:
        headers = [(b"content-type", b"application/json")]
        headers += [(k.lower().encode(), v.encode()) for k, v in error.headers().items()]
        body = error_body(self.service.error_shape(path), error)
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive):
    """A receive() that gives the app the body already read, then defers to the client's connection
    (whose next message is the disconnect, which ``Service.embed`` waits for)."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
