"""Dynamic batching across requests: a bounded queue of tokenized texts and one worker thread that runs
them through the session in length-sorted batches within a token budget.

A request's texts become queue items; the worker cuts the queued items into batches with the
``Embedder``'s own ``plan_batches`` (longest first, at most ``max_batch_size`` texts and
``max_batch_tokens`` padded tokens) and runs the batch holding the oldest item, so no text starves
behind a stream of others. Rows go back to their request by index, so a request split across batches
is reassembled in order. An idle worker waits up to ``max_wait_ms`` after the oldest item arrived for a
fuller batch. The queue is bounded in tokens: over ``max_queue_tokens`` a request is refused
(``QueueFull``, with a Retry-After estimate) rather than held in memory.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from bitnet_onnx.runtime.embedder import plan_batches
from bitnet_onnx.runtime.server.config import ServerConfig
from bitnet_onnx.runtime.server.metrics import Metrics
from bitnet_onnx.runtime.session import first_line


class QueueFull(Exception):
    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


class Draining(Exception):
    """The server is shutting down and takes no new work."""


class BatchFailed(Exception):
    """The session failed on this request's texts (even run alone)."""


@dataclass(eq=False)
class _Job:
    rows: np.ndarray  # float32 [texts, dimension], filled by the worker
    remaining: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    abandoned: bool = False  # the client went away or a text failed: skip its queued texts


@dataclass(eq=False)
class _Item:
    job: _Job
    index: int  # row in job.rows
    ids: Sequence[int]
    prompt_length: int  # leading tokens the pooling leaves out (Embedder.prompt_length)
    queued_at: float = field(default_factory=time.monotonic)


class Batcher:
    """Batches ``run_batch(ids, prompt_lengths)`` calls (``Embedder.run_batch``: token id lists -> float32
    [n, dimension]) across concurrent requests."""

    def __init__(self, run_batch: Callable[[list, list], np.ndarray], dimension: int, config: ServerConfig,
                 metrics: Metrics):
        self._run_batch = run_batch
        self._dimension = dimension
        self._config = config
        self._metrics = metrics
        self._cond = threading.Condition()
        self._pending: list[_Item] = []  # arrival order
        self._pending_tokens = 0
        self._draining = False
        self._stopping = False
        self._tokens_per_s: float | None = None  # recent session speed, for Retry-After
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._work, name="bitnet-onnx-batcher", daemon=True)
        self._thread.start()

    def drain(self) -> None:
        """Marks the server as shutting down (``draining``: the app refuses new requests) and stops
        waiting for fuller batches; queued work and requests already in flight still run."""
        with self._cond:
            self._draining = True
            self._cond.notify_all()

    def stop(self, timeout: float | None = None) -> None:
        """Drains, lets the worker finish the queue and joins it."""
        with self._cond:
            self._draining = self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def draining(self) -> bool:
        return self._draining

    async def embed(self, ids: list[list[int]], prompt_length: int = 0) -> np.ndarray:
        """The session's sentence embeddings of these token id lists: float32 [len(ids), dimension], in order.
        ``prompt_length``: of the prompt in front of every text (0: none, or the pooling includes it)."""
        loop = asyncio.get_running_loop()
        job = _Job(np.empty((len(ids), self._dimension), dtype=np.float32), len(ids), loop.create_future(), loop)
        tokens = sum(len(x) for x in ids)
        with self._cond:
            if self._stopping:  # draining still admits requests already past the door (in flight)
                raise Draining()
            if self._pending and self._pending_tokens + tokens > self._config.max_queue_tokens:
                raise QueueFull(self._retry_after())
            now = time.monotonic()
            self._pending.extend(_Item(job, i, x, prompt_length, now) for i, x in enumerate(ids))
            self._pending_tokens += tokens
            self._publish_queue()
            self._cond.notify_all()
        try:
            return await job.future
        except asyncio.CancelledError:
            job.abandoned = True  # its texts still queued are dropped by the worker
            raise

    # --- worker thread ---------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cond:
                batch = self._next_batch()
                if batch is None:
                    return
            self._run(batch)

    def _next_batch(self) -> list[_Item] | None:
        """Waits for work (and briefly for a fuller batch), takes one batch off the queue; None: stop."""
        c = self._config
        while True:
            self._drop_abandoned()
            if self._pending:
                break
            if self._stopping:
                return None
            self._cond.wait()
        deadline = self._pending[0].queued_at + c.max_wait_ms / 1000
        while not self._draining and len(self._pending) < c.max_batch_size \
                and self._pending_tokens < c.max_batch_tokens:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(left)
        self._drop_abandoned()
        if not self._pending:
            return self._next_batch()
        plan = plan_batches([len(item.ids) for item in self._pending], c.max_batch_size, c.max_batch_tokens)
        chosen = next(b for b in plan if 0 in b)  # the batch holding the oldest text
        taken = set(chosen)
        batch = [self._pending[i] for i in chosen]
        self._pending = [item for i, item in enumerate(self._pending) if i not in taken]
        self._pending_tokens -= sum(len(item.ids) for item in batch)
        self._publish_queue()
        return batch

    def _drop_abandoned(self) -> None:
        if any(item.job.abandoned for item in self._pending):
            self._pending = [item for item in self._pending if not item.job.abandoned]
            self._pending_tokens = sum(len(item.ids) for item in self._pending)
            self._publish_queue()

    def _run(self, batch: list[_Item], retry: bool = False) -> None:
        m = self._metrics
        start = time.monotonic()
        if not retry:
            for item in batch:
                m.queue_seconds.observe(start - item.queued_at)
        try:
            rows = self._run_batch([item.ids for item in batch], [item.prompt_length for item in batch])
        except Exception as e:
            if len(batch) > 1:  # find the texts at fault: the others still get their rows
                for item in batch:
                    if not item.job.abandoned:
                        self._run([item], retry=True)
                return
            self._fail(batch[0].job, BatchFailed(f"inference failed: {first_line(e)}"))
            return
        elapsed = time.monotonic() - start
        width = max(len(item.ids) for item in batch)
        m.batch_size.observe(len(batch))
        m.batch_tokens.observe(len(batch) * width)
        m.batch_seconds.observe(elapsed)
        tokens = sum(len(item.ids) for item in batch)
        m.inputs.inc(len(batch))
        m.tokens.inc(tokens)
        if elapsed > 0:
            speed = tokens / elapsed
            self._tokens_per_s = speed if self._tokens_per_s is None else 0.8 * self._tokens_per_s + 0.2 * speed
        for item, row in zip(batch, rows):
            job = item.job
            if job.abandoned:
                continue
            job.rows[item.index] = row
            job.remaining -= 1
            if job.remaining == 0:
                job.loop.call_soon_threadsafe(_settle, job.future, job.rows, None)

    def _fail(self, job: _Job, error: Exception) -> None:
        if not job.abandoned:
            job.abandoned = True
            job.loop.call_soon_threadsafe(_settle, job.future, None, error)

    def _retry_after(self) -> int:
        """Seconds until the queue has likely drained, from the recent session speed (1 to 60)."""
        if not self._tokens_per_s:
            return 1
        return int(min(60, max(1, math.ceil(self._pending_tokens / self._tokens_per_s))))

    def _publish_queue(self) -> None:
        self._metrics.queue_tokens.set(self._pending_tokens)
        self._metrics.queue_inputs.set(len(self._pending))


def _settle(future: asyncio.Future, result, error) -> None:
    if future.done():  # cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
