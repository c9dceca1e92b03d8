"""Errors as HTTP responses: OpenAI's body shape on the OpenAI routes, TEI's on TEI's (each router names
its shape, ``routers.ROUTERS``)."""

from __future__ import annotations

import json

OPENAI, TEI = "openai", "tei"  # error body shapes
CLIENT_GONE = 499  # nginx's "client closed request": counted in the metrics, never seen by the client

# status -> (OpenAI "type", TEI "error_type")
_KINDS = {
    400: ("invalid_request_error", "Validation"),
    401: ("authentication_error", "Unauthorized"),
    404: ("invalid_request_error", "Validation"),
    405: ("invalid_request_error", "Validation"),
    413: ("invalid_request_error", "Validation"),
    422: ("invalid_request_error", "Validation"),
    429: ("rate_limit_error", "Overloaded"),
    499: ("invalid_request_error", "Validation"),
    500: ("server_error", "Backend"),
    503: ("server_error", "Unhealthy"),
}


class ApiError(Exception):
    """A request the server answers with ``status`` and a one-line ``message`` (``param``: the field at fault)."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        headers = {}
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        if self.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return headers


def error_body(shape: str, error: ApiError) -> bytes:
    """The JSON body for ``error`` in ``shape`` (OPENAI or TEI)."""
    openai_type, tei_type = _KINDS.get(error.status, _KINDS[500] if error.status >= 500 else _KINDS[400])
    if shape == TEI:
        body = {"error": error.message, "error_type": tei_type}
    else:
        body = {"error": {"message": error.message, "type": openai_type, "param": error.param, "code": error.code}}
    return json.dumps(body).encode()
