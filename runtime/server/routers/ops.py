"""Operations: GET /health (probes) and GET /metrics (Prometheus). Open: no API key, up while draining."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from bitnet_onnx.runtime.server.errors import ApiError
from bitnet_onnx.runtime.server.responses import json_response
from bitnet_onnx.runtime.server.service import Service, get_service

router = APIRouter()


@router.get("/health")
async def health(service: Service = Depends(get_service)):
    if service.batcher.draining:
        raise ApiError(503, "the server is shutting down", code="shutting_down", retry_after=1)
    return json_response({"status": "ok"})


@router.get("/metrics")
async def metrics(service: Service = Depends(get_service)):
    return Response(generate_latest(service.metrics.registry), media_type=CONTENT_TYPE_LATEST)
