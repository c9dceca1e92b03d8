"""The server's limits and batching knobs: one dataclass, filled by the ``serve`` verb's flags."""

from __future__ import annotations

import math
from dataclasses import dataclass

from bitnet_onnx.errors import BitnetOnnxError
from bitnet_onnx.runtime.embedder import MAX_BATCH_TOKENS


@dataclass(frozen=True)
class ServerConfig:
    model_name: str  # the id /v1/models lists and responses report
    max_batch_tokens: int = MAX_BATCH_TOKENS  # padded tokens per session run (texts x longest text)
    max_batch_size: int = 32  # texts per session run (Embedder.encode's default batch_size)
    max_wait_ms: float = 2.0  # how long an idle worker waits for more texts to fill a batch
    max_queue_tokens: int = 65536  # queued tokens over which new requests wait in line (back-pressure)
    max_line_wait_s: float = 5.0  # how long a request waits in line for queue space before 429
    max_inputs: int = 2048  # inputs per request (OpenAI's limit)
    max_body_bytes: int = 8 << 20  # request bodies over this get 413
    auto_truncate: bool = False  # truncate texts over max_length instead of answering 400 (TEI's flag)
    api_key: str | None = None  # when set, requests need "Authorization: Bearer <key>"
    graceful_timeout_s: float = 30.0  # SIGTERM: how long in-flight requests may take to finish
    ranges: str | None = None  # calibration file of output_dtype int8 / uint8 (None: the export's own)

    def __post_init__(self):
        for name in ("max_batch_tokens", "max_batch_size", "max_queue_tokens", "max_inputs", "max_body_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BitnetOnnxError(f"{name} must be a positive integer, got {value!r}")
        if not self.max_wait_ms >= 0:
            raise BitnetOnnxError(f"max_wait_ms must be >= 0, got {self.max_wait_ms!r}")
        if not 0 <= self.max_line_wait_s < math.inf:
            raise BitnetOnnxError(f"max_line_wait_s must be a finite number >= 0, got {self.max_line_wait_s!r}")
        if not self.graceful_timeout_s > 0:
            raise BitnetOnnxError(f"graceful_timeout_s must be > 0, got {self.graceful_timeout_s!r}")
        if self.api_key is not None and not self.api_key:
            raise BitnetOnnxError("api_key must not be empty")
