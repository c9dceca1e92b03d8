"""``bitnet-onnx serve``: an OpenAI / TEI compatible embeddings server for an exported folder."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from pathlib import Path

from bitnet_onnx.commands.memory_args import add_batch_memory_argument, batch_memory_bytes
from bitnet_onnx.errors import BitnetOnnxError

EPILOG = """\
examples:
  bitnet-onnx serve out/                                   # http://127.0.0.1:8080
  bitnet-onnx serve out/ --host 0.0.0.0 --port 8000 --threads 4 --api-key "$KEY"
  curl -s localhost:8080/v1/embeddings -H 'Content-Type: application/json' \\
       -d '{"model": "out", "input": ["a cat sat on the mat", "a dog in the fog"]}'

Endpoints: POST /v1/embeddings (OpenAI), GET /v1/models, POST /embed (Hugging Face TEI),
GET /health, GET /metrics (Prometheus). Both embedding routes take Voyage AI's "output_dtype"
(float, int8, uint8, binary, ubinary; int8/uint8 scaled by --ranges or the export's
calibration_ranges.json); base64 answers hold the stored bytes. Texts of concurrent requests are batched together (at most
--max-batch-size texts and --max-batch-tokens padded tokens per run, longest first); an idle server
waits up to --max-wait-ms for a fuller batch. Over --max-queue-tokens queued tokens, new requests wait
in line, in arrival order, up to --max-line-wait seconds, then get 429 with a jittered Retry-After.
A client that disconnects has its queued texts dropped. SIGTERM or Ctrl-C: in-flight requests finish,
then the server exits 0.
The API key can also come from BITNET_ONNX_API_KEY (keeps it out of the process list).
Details: docs/serve.md.
"""

API_KEY_ENV = "BITNET_ONNX_API_KEY"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from bitnet_onnx.runtime.server.config import ServerConfig  # no fastapi: --help works without the extra

    d = {f.name: f.default for f in fields(ServerConfig)}
    p.epilog = EPILOG
    p.add_argument("out_dir", metavar="EXPORT_DIR", help="a folder written by 'bitnet-onnx export'")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    p.add_argument("--threads", type=int, metavar="N", help="ONNX Runtime intra-op threads (default: all cores)")
    p.add_argument("--model-name", metavar="NAME", help="model id in /v1/models and responses (default: the folder's name)")
    p.add_argument("--max-batch-tokens", type=int, default=d["max_batch_tokens"], metavar="N",
                   help=f"padded tokens per session run (texts x longest; default {d['max_batch_tokens']})")
    add_batch_memory_argument(p)
    p.add_argument("--max-batch-size", type=int, default=d["max_batch_size"], metavar="N",
                   help=f"texts per session run (default {d['max_batch_size']})")
    p.add_argument("--max-wait-ms", type=float, default=d["max_wait_ms"], metavar="MS",
                   help=f"how long an idle server waits to fill a batch (default {d['max_wait_ms']:g})")
    p.add_argument("--max-queue-tokens", type=int, default=d["max_queue_tokens"], metavar="N",
                   help=f"queued tokens over which requests wait in line (default {d['max_queue_tokens']})")
    p.add_argument("--max-line-wait", type=float, default=d["max_line_wait_s"], metavar="S",
                   help=f"seconds a request waits in line for queue space before 429 "
                        f"(default {d['max_line_wait_s']:g}; 0: refuse at once)")
    p.add_argument("--max-inputs", type=int, default=d["max_inputs"], metavar="N",
                   help=f"inputs per request (default {d['max_inputs']})")
    p.add_argument("--max-body-bytes", type=int, default=d["max_body_bytes"], metavar="N",
                   help=f"request body limit, 413 over it (default {d['max_body_bytes']})")
    p.add_argument("--auto-truncate", action="store_true",
                   help="truncate texts over the export's max_length instead of answering 400 "
                        "(TEI's /embed 'truncate' field overrides it per request)")
    p.add_argument("--ranges", metavar="FILE",
                   help="calibration ranges of output_dtype int8/uint8 (a 'bitnet-onnx calibrate' file; "
                        "default: EXPORT_DIR/calibration_ranges.json)")
    p.add_argument("--api-key", metavar="KEY", help=f"require 'Authorization: Bearer KEY' (or set {API_KEY_ENV})")
    p.add_argument("--graceful-timeout", type=float, default=d["graceful_timeout_s"], metavar="S",
                   help=f"on SIGTERM, seconds in-flight requests may take before they are cut "
                        f"(default {d['graceful_timeout_s']:g})")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn's log level (default info)")
    p.add_argument("--access-log", action="store_true", help="log every request")


def run(args: argparse.Namespace) -> int:
    try:
        from bitnet_onnx.runtime.server import ServerConfig, create_app, listen, serve
    except ImportError as e:
        raise BitnetOnnxError(f"serve needs the 'serve' extra ({e.name} is missing): "
                              f"pip install 'bitnet-onnx[serve]'") from None
    from bitnet_onnx.runtime.embedder import Embedder

    if not 0 <= args.port <= 65535:
        raise BitnetOnnxError(f"--port must be from 0 to 65535, got {args.port}")
    folder = Path(args.out_dir)
    config = ServerConfig(
        model_name=args.model_name or folder.resolve().name,
        max_batch_tokens=args.max_batch_tokens, max_batch_size=args.max_batch_size,
        max_wait_ms=args.max_wait_ms, max_queue_tokens=args.max_queue_tokens, max_line_wait_s=args.max_line_wait,
        max_inputs=args.max_inputs,
        max_body_bytes=args.max_body_bytes, auto_truncate=args.auto_truncate,
        api_key=args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None,
        graceful_timeout_s=args.graceful_timeout, ranges=args.ranges)
    embedder = Embedder(folder, threads=args.threads, max_batch_bytes=batch_memory_bytes(args.max_batch_memory))
    app = create_app(embedder, config)  # reads --ranges: its errors come before the server listens
    sock = listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"bitnet-onnx serve: {config.model_name} (dimension {embedder.dimension}) on http://{shown}:{port}",
          file=sys.stderr, flush=True)
    serve(app, sock, graceful_timeout_s=config.graceful_timeout_s, log_level=args.log_level, access_log=args.access_log)
    return 0
