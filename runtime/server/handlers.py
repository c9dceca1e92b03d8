"""Exception handlers: every error, FastAPI's and Starlette's included, as one JSON line in the route's shape."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from bitnet_onnx.runtime.server.errors import ApiError, error_body
from bitnet_onnx.runtime.session import first_line

log = logging.getLogger("bitnet_onnx.serve")


def error_response(shape: str, error: ApiError) -> Response:
    return Response(error_body(shape, error), status_code=error.status, media_type="application/json",
                    headers=error.headers())


def add_error_handlers(app: FastAPI) -> None:
    def respond(request: Request, error: ApiError) -> Response:
        return error_response(request.app.state.service.error_shape(request.url.path), error)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError):
        return respond(request, e)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, e: RequestValidationError):
        return respond(request, validation_error(e))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException):
        if e.status_code == 400 and e.__cause__ is not None:  # FastAPI's "error parsing the body"
            return respond(request, ApiError(400, f"the request body is not valid JSON ({_reason(e.__cause__)})"))
        return respond(request, ApiError(e.status_code, str(e.detail)))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception):
        log.exception("bitnet-onnx serve: unexpected error on %s", request.url.path)
        return respond(request, ApiError(500, f"internal error: {type(e).__name__}"))


def _reason(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nested too deeply"
    return first_line(e)


def validation_error(e: RequestValidationError) -> ApiError:
    """pydantic's first complaint as one line naming the field."""
    errors = e.errors()
    if not errors:
        return ApiError(400, "invalid request body")
    first = errors[0]
    if first.get("type") == "json_invalid":
        return ApiError(400, "the request body is not valid JSON")
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    if not loc:
        return ApiError(400, "the request body must be a JSON object")
    return ApiError(400, f"{'.'.join(loc)}: {first.get('msg', 'invalid value')}", loc[0])
