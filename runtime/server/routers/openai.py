"""OpenAI's embeddings API: POST /v1/embeddings, GET /v1/models (errors in OpenAI's shape)."""

from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Depends, Request

from bitnet_onnx.runtime.server.inputs import parse_openai_input
from bitnet_onnx.runtime.server.responses import dumps, json_response, rows_response
from bitnet_onnx.runtime.server.schemas import EmbeddingsRequest
from bitnet_onnx.runtime.server.service import Service, get_service

router = APIRouter()


@router.post("/v1/embeddings")
async def embeddings(body: EmbeddingsRequest, request: Request, service: Service = Depends(get_service)):
    config = service.config
    texts, ids = parse_openai_input(body.input, config.max_inputs)
    out, tokens = await service.embed(request, texts, ids, truncate=config.auto_truncate, dimensions=body.dimensions,
                                      output_dtype=body.output_dtype)
    return await rows_response(_body, out, body.encoding_format or "float", tokens, config.model_name)


@router.get("/v1/models")
async def models(service: Service = Depends(get_service)):
    model = {"id": service.config.model_name, "object": "model", "created": service.created,
             "owned_by": "bitnet-onnx"}
    return json_response({"object": "list", "data": [model]})


def _body(out: np.ndarray, encoding_format: str, tokens: int, model: str) -> bytes:
    if encoding_format == "base64":
        # the stored bytes: little-endian float32, or the int8 / uint8 values (binary's packed bits)
        little = out.astype(out.dtype.newbyteorder("<"), copy=False)
        vectors = [base64.b64encode(row.tobytes()).decode("ascii") for row in little]
    else:
        vectors = out.tolist()
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return dumps({"object": "list", "data": data, "model": model,
                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
