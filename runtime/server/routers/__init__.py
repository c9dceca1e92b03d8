"""The server's routers, one per API, and what each implies for its routes (``ROUTERS``).

Adding an endpoint: docs/contributing.md, "Add a server endpoint".
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter

from bitnet_onnx.runtime.server.errors import OPENAI, TEI
from bitnet_onnx.runtime.server.routers import ops, openai, tei


@dataclass(frozen=True)
class Api:
    router: APIRouter
    error_shape: str  # errors.OPENAI or errors.TEI: the JSON body of its errors
    open: bool = False  # no API key, and still served while draining (probes, scrapers)

    @property
    def paths(self) -> list[str]:
        return [route.path for route in self.router.routes]


ROUTERS = (Api(openai.router, OPENAI), Api(tei.router, TEI), Api(ops.router, OPENAI, open=True))
