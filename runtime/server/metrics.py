"""Prometheus metrics of one server (its own registry, so several apps can live in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

PREFIX = "bitnet_onnx"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_TOKEN_BUCKETS = (16, 64, 256, 1024, 4096, 16384, 65536)


class Metrics:
    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.requests = Counter(f"{PREFIX}_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=r)
        self.latency = Histogram(f"{PREFIX}_request_duration_seconds", "HTTP request latency by route",
                                 ["route"], buckets=_LATENCY_BUCKETS, registry=r)
        self.in_progress = Gauge(f"{PREFIX}_requests_in_progress", "HTTP requests being handled", registry=r)
        self.inputs = Counter(f"{PREFIX}_inputs", "texts and token id lists embedded", registry=r)
        self.tokens = Counter(f"{PREFIX}_tokens", "tokens embedded (prompts and special tokens included)",
                              registry=r)
        self.output_vectors = Counter(f"{PREFIX}_output_vectors", "embeddings returned by output_dtype",
                                      ["output_dtype"], registry=r)
        self.batch_size = Histogram(f"{PREFIX}_batch_size", "texts per session run",
                                    buckets=_BATCH_SIZE_BUCKETS, registry=r)
        self.batch_tokens = Histogram(f"{PREFIX}_batch_padded_tokens", "padded tokens (texts x width) per session run",
                                      buckets=_TOKEN_BUCKETS, registry=r)
        self.batch_seconds = Histogram(f"{PREFIX}_batch_duration_seconds", "time of one session run",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.queue_seconds = Histogram(f"{PREFIX}_queue_duration_seconds",
                                       "time a text waited in the queue before its session run",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.queue_tokens = Gauge(f"{PREFIX}_queue_tokens", "tokens waiting in the queue", registry=r)
        self.queue_inputs = Gauge(f"{PREFIX}_queue_inputs", "texts waiting in the queue", registry=r)
        self.running_inputs = Gauge(f"{PREFIX}_running_inputs", "texts in the session run now", registry=r)
        self.rejected = Counter(f"{PREFIX}_rejected_requests", "requests refused by back-pressure or shutdown",
                                ["reason"], registry=r)
        self.line_requests = Gauge(f"{PREFIX}_line_requests", "requests waiting in line for queue space",
                                   registry=r)
        self.line_seconds = Histogram(f"{PREFIX}_line_duration_seconds",
                                      "time a request waited in line for queue space (admitted or refused)",
                                      buckets=_LATENCY_BUCKETS, registry=r)
        self.stopped_runs = Counter(f"{PREFIX}_stopped_runs", "session runs stopped because all their clients went away",
                                    registry=r)
        self.abandoned_inputs = Counter(f"{PREFIX}_abandoned_inputs",
                                        "texts not embedded because their client went away", registry=r)

    def add_routes(self, routes) -> None:
        """Lists every route (its path template: the label of its requests) before its first request."""
        for route in routes:
            self.latency.labels(route)
