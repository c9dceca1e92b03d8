"""Hugging Face TEI's POST /embed (errors in TEI's shape)."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Depends, Request

from bitnet_onnx.runtime.server.errors import ApiError
from bitnet_onnx.runtime.server.inputs import parse_tei_inputs
from bitnet_onnx.runtime.server.responses import dumps, rows_response
from bitnet_onnx.runtime.server.schemas import EmbedRequest
from bitnet_onnx.runtime.server.service import Service, get_service

router = APIRouter()


@router.post("/embed")
async def embed(body: EmbedRequest, request: Request, service: Service = Depends(get_service)):
    config = service.config
    texts = parse_tei_inputs(body.inputs, config.max_inputs)
    if body.truncation_direction.lower() != "right":
        raise ApiError(400, "truncation_direction: only 'right' is supported", "truncation_direction")
    truncate = config.auto_truncate if body.truncate is None else body.truncate
    out, _ = await service.embed(request, texts, truncate=truncate, prompt_name=body.prompt_name,
                                 dimensions=body.dimensions, normalize=body.normalize, output_dtype=body.output_dtype,
                                 field="inputs")
    return await rows_response(_body, out)


def _body(out: np.ndarray) -> bytes:
    return dumps(out.tolist())
