"""Dynamic batching across requests: a bounded queue of tokenized texts, a line of requests waiting for
queue space, and one worker thread that runs the queue through the session in length-sorted batches
within a token budget.

A request's texts become queue items; the worker cuts the queued items into batches with the
``Embedder``'s own ``plan_batches`` (longest first, at most ``max_batch_size`` texts and
``max_batch_tokens`` padded tokens) and runs the batch holding the oldest item, so no text starves
behind a stream of others. Rows go back to their request by index, so a request split across batches
is reassembled in order. An idle worker waits up to ``max_wait_ms`` after the oldest item arrived for a
fuller batch.

Back-pressure, fair under a burst: the queue holds at most ``max_queue_tokens`` tokens (a request is
always admitted into an empty queue). A request that does not fit, or that arrives while others wait,
joins the line: requests enter the queue strictly in arrival order as it drains, so a large request is
not overtaken by a stream of small ones. A request waits in line at most ``max_line_wait_s``; the line
holds what the session likely runs in that time (at least ``max_queue_tokens``, at most 8 times that),
admitting any request while it holds less (whatever the request's size). Over either bound the request
is refused (``QueueFull``) with a Retry-After drawn at random
between the time the queue and line need to drain and twice that, so clients refused together do not
come back together.

A request whose client has gone (its ``embed`` call cancelled) leaves the line, its queued texts are
dropped, and a session run that holds only texts of such requests is stopped (``RunControl.stop``).
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from bitnet_onnx.runtime.memory import plan_batches
from bitnet_onnx.runtime.memory import BatchMemory
from bitnet_onnx.runtime.server.config import ServerConfig
from bitnet_onnx.runtime.server.metrics import Metrics
from bitnet_onnx.runtime.session import first_line

MAX_RETRY_AFTER_S = 60
LINE_CAPACITY_QUEUES = 8  # the line holds at most this many queues' worth of tokens


class QueueFull(Exception):
    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


class Draining(Exception):
    """The server is shutting down and takes no new work."""


class BatchFailed(Exception):
    """The session failed on this request's texts (even run alone)."""


class RunControl(Protocol):
    """What lets the batcher stop a session run from another thread (``StoppableRuns``: the run's options)."""

    def begin(self) -> None: ...  # a new run starts (it is not stopped yet)

    def stop(self) -> None: ...  # the run begun last ends early, raising from ``run_batch``


@dataclass(eq=False)
class _Job:
    rows: np.ndarray  # float32 [texts, dimension], filled by the worker
    remaining: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    abandoned: bool = False  # the client went away or a text failed: its texts are not run
    gone: bool = False  # the client went away (its texts not run count as abandoned_inputs)


@dataclass(eq=False)
class _Item:
    job: _Job
    index: int  # row in job.rows
    ids: Sequence[int]
    prompt_length: int  # leading tokens the pooling leaves out (Embedder.prompt_length)
    queued_at: float = 0.0  # when it entered the queue (not the line)


@dataclass(eq=False)
class _Waiting:
    """A request in line for queue space."""
    items: list[_Item]
    tokens: int
    admitted: asyncio.Future  # set (from the worker thread) once its items are in the queue
    loop: asyncio.AbstractEventLoop
    since: float = field(default_factory=time.monotonic)
    queued: bool = False  # out of the line, into the queue (under the lock; ``admitted`` follows)


class Batcher:
    """Batches ``run_batch(ids, prompt_lengths)`` calls (``Embedder.run_batch`` with the ``runs``' options: token id lists -> float32
    [n, dimension]) across concurrent requests. ``runs``: stops a run whose requests all went away;
    ``memory``: the export's activation bytes per batch (runtime/memory.py), a cap besides the token counts."""

    def __init__(self, run_batch: Callable[[list, list], np.ndarray], dimension: int, config: ServerConfig,
                 metrics: Metrics, runs: RunControl | None = None, rng: random.Random | None = None,
                 memory: BatchMemory | None = None):
        self._run_batch = run_batch
        self._memory = memory  # batches cut to its bytes too; the service refuses a text that alone exceeds it
        self._dimension = dimension
        self._config = config
        self._metrics = metrics
        self._runs = runs
        self._rng = rng or random.Random()  # Retry-After jitter
        self._cond = threading.Condition()
        self._pending: list[_Item] = []  # arrival order
        self._pending_tokens = 0
        self._line: deque[_Waiting] = deque()  # arrival order
        self._line_tokens = 0
        self._running: list[_Item] = []  # the batch in the session now
        self._run_stopped = False
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
        ``prompt_length``: of the prompt in front of every text (0: none, or the pooling includes it).
        Cancelling the call (the client went away) drops whatever of the request is not done."""
        loop = asyncio.get_running_loop()
        job = _Job(np.empty((len(ids), self._dimension), dtype=np.float32), len(ids), loop.create_future(), loop)
        items = [_Item(job, i, x, prompt_length) for i, x in enumerate(ids)]
        tokens = sum(len(x) for x in ids)
        waiting = None
        with self._cond:
            if self._stopping:  # draining still admits requests already past the door (in flight)
                raise Draining()
            if not self._line and self._fits(tokens):
                self._enqueue(items, tokens)
            elif self._line_tokens >= self._line_capacity():
                raise QueueFull(self._retry_after())
            else:
                waiting = _Waiting(items, tokens, loop.create_future(), loop)
                self._line.append(waiting)
                self._line_tokens += tokens
                self._publish()
        try:
            if waiting is not None:
                await self._wait_in_line(waiting)
            return await job.future
        except asyncio.CancelledError:
            self._abandon(job, waiting)
            raise

    async def _wait_in_line(self, waiting: _Waiting) -> None:
        try:
            await asyncio.wait_for(waiting.admitted, self._config.max_line_wait_s)
        except TimeoutError:
            with self._cond:
                if waiting.queued:
                    return  # admitted as the time ran out
                self._leave_line(waiting)
                raise QueueFull(self._retry_after()) from None
        finally:
            self._metrics.line_seconds.observe(time.monotonic() - waiting.since)

    def _abandon(self, job: _Job, waiting: _Waiting | None) -> None:
        """The request's client went away: nothing more of it runs (called on the event loop)."""
        with self._cond:
            job.abandoned = job.gone = True
            dropped = 0
            if waiting is not None and not waiting.queued:
                self._leave_line(waiting)
                dropped += len(waiting.items)
            dropped += self._drop_queued(job)
            self._metrics.abandoned_inputs.inc(dropped)  # those in the running batch: counted by _run
            if self._runs is not None and self._running and not self._run_stopped \
                    and all(i.job.abandoned for i in self._running):
                self._run_stopped = True
                self._runs.stop()
                self._metrics.stopped_runs.inc()
            self._cond.notify_all()

    # --- under the lock --------------------------------------------------------------------------

    def _line_capacity(self) -> float:
        """Tokens the line may hold: what the session likely runs within ``max_line_wait_s`` at its recent
        speed, from ``max_queue_tokens`` to LINE_CAPACITY_QUEUES times that (memory stays bounded)."""
        limit = self._config.max_queue_tokens
        return min(LINE_CAPACITY_QUEUES * limit, max(limit, (self._tokens_per_s or 0) * self._config.max_line_wait_s))

    def _fits(self, tokens: int) -> bool:
        return not self._pending or self._pending_tokens + tokens <= self._config.max_queue_tokens

    def _enqueue(self, items: list[_Item], tokens: int) -> None:
        now = time.monotonic()
        for item in items:
            item.queued_at = now
        self._pending.extend(items)
        self._pending_tokens += tokens
        self._publish()
        self._cond.notify_all()

    def _admit_line(self) -> None:
        """Moves requests from the head of the line into the queue while they fit."""
        while self._line and self._fits(self._line[0].tokens):
            waiting = self._line.popleft()
            waiting.queued = True
            self._line_tokens -= waiting.tokens
            self._enqueue(waiting.items, waiting.tokens)
            waiting.loop.call_soon_threadsafe(_settle, waiting.admitted, True, None)
        self._publish()

    def _leave_line(self, waiting: _Waiting) -> None:
        self._line.remove(waiting)
        self._line_tokens -= waiting.tokens
        self._admit_line()  # the next one may fit where this one did not

    def _drop_queued(self, job: _Job) -> int:
        """Removes ``job``'s queued texts; how many there were."""
        kept = [item for item in self._pending if item.job is not job]
        dropped = len(self._pending) - len(kept)
        if dropped:
            self._pending = kept
            self._pending_tokens = sum(len(item.ids) for item in kept)
            self._admit_line()
        return dropped

    def _retry_after(self) -> int:
        """Seconds to wait, at random from the time the queue and the line likely need to drain (at the
        recent session speed; at least 1) to twice that, at most MAX_RETRY_AFTER_S."""
        backlog = self._pending_tokens + self._line_tokens
        drain = math.ceil(backlog / self._tokens_per_s) if self._tokens_per_s else 1
        drain = min(MAX_RETRY_AFTER_S, max(1, drain))
        return min(MAX_RETRY_AFTER_S, drain + self._rng.randint(0, drain))

    def _publish(self) -> None:
        self._metrics.queue_tokens.set(self._pending_tokens)
        self._metrics.queue_inputs.set(len(self._pending))
        self._metrics.line_requests.set(len(self._line))

    # --- worker thread ---------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cond:
                batch = self._next_batch()
                if batch is None:
                    return
                self._running, self._run_stopped = batch, False
                self._metrics.running_inputs.set(len(batch))
                if self._runs is not None:
                    self._runs.begin()
            try:
                self._run(batch)
            finally:
                with self._cond:
                    self._running = []
                    self._metrics.running_inputs.set(0)

    def _next_batch(self) -> list[_Item] | None:
        """Waits for work (and briefly for a fuller batch), takes one batch off the queue; None: stop."""
        c = self._config
        while True:
            if not self._pending:
                if self._stopping:
                    return None
                self._cond.wait()
                continue
            left = self._pending[0].queued_at + c.max_wait_ms / 1000 - time.monotonic()
            if self._draining or left <= 0 or len(self._pending) >= c.max_batch_size \
                    or self._pending_tokens >= c.max_batch_tokens:
                break
            self._cond.wait(left)
        plan = plan_batches([len(item.ids) for item in self._pending], c.max_batch_size, c.max_batch_tokens, self._memory)
        chosen = next(b for b in plan if 0 in b)  # the batch holding the oldest text
        taken = set(chosen)
        batch = [self._pending[i] for i in chosen]
        self._pending = [item for i, item in enumerate(self._pending) if i not in taken]
        self._pending_tokens -= sum(len(item.ids) for item in batch)
        self._admit_line()
        return batch

    def _run(self, batch: list[_Item], retry: bool = False) -> None:
        m = self._metrics
        start = time.monotonic()
        if not retry:
            for item in batch:
                m.queue_seconds.observe(start - item.queued_at)
        try:
            rows = self._run_batch([item.ids for item in batch], [item.prompt_length for item in batch])
        except Exception as e:
            with self._cond:
                stopped = self._run_stopped
            if stopped:  # on purpose: every request in it has gone
                m.abandoned_inputs.inc(sum(item.job.gone for item in batch))
                return
            if len(batch) > 1:  # find the texts at fault: the others still get their rows
                for item in batch:
                    if not item.job.abandoned:
                        self._run([item], retry=True)
                    elif item.job.gone:
                        m.abandoned_inputs.inc()
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
        with self._cond:
            if job.abandoned:
                return
            job.abandoned = True
            self._drop_queued(job)
        job.loop.call_soon_threadsafe(_settle, job.future, None, error)


def _settle(future: asyncio.Future, result, error) -> None:
    if future.done():  # cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
