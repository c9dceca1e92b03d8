"""The server's batcher alone (no HTTP), with a session stand-in the test holds and releases: the line
keeps arrival order, its wait is bounded, refusals do not depend on a request's size and carry a
jittered Retry-After, and requests whose clients go away are dropped from the line, the queue and a
session run that holds nothing else. Last, ONNX Runtime's terminate flag really stops a run."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")

from bitnet_onnx.runtime.server.batcher import Batcher, QueueFull  # noqa: E402
from bitnet_onnx.runtime.server.config import ServerConfig  # noqa: E402
from bitnet_onnx.runtime.server.metrics import Metrics  # noqa: E402
from bitnet_onnx.runtime.server.stoppable import StoppableRuns  # noqa: E402

HANG_GUARD_S = 30  # every wait below ends long before this unless something hangs


class HeldSession:
    """``run_batch`` that records each run's token ids and blocks until ``release`` (or ``stop``: it then
    fails, as ORT does when RunOptions.terminate is set). Rows: [sum of ids, count of ids]."""

    def __init__(self):
        self.runs: list[list[list[int]]] = []
        self.stops = 0
        self._released = threading.Event()
        self._stopped = threading.Event()
        self._started = threading.Semaphore(0)

    def release(self) -> None:
        self._released.set()

    def begin(self) -> None:
        self._stopped.clear()

    def stop(self) -> None:
        self.stops += 1
        self._stopped.set()

    def run_batch(self, ids, prompt_lengths) -> np.ndarray:
        self.runs.append([list(x) for x in ids])
        self._started.release()
        deadline = time.monotonic() + HANG_GUARD_S
        while not self._released.is_set():
            if self._stopped.is_set():
                raise RuntimeError("Exiting due to terminate flag being set to true.")
            assert time.monotonic() < deadline, "never released"
            time.sleep(0.002)
        return np.array([[float(sum(x)), float(len(x))] for x in ids], dtype=np.float32)

    async def running(self) -> None:
        """Returns once a run has started (one per call)."""
        assert await asyncio.to_thread(self._started.acquire, timeout=HANG_GUARD_S), "no run started"


def make_batcher(session: HeldSession, rng: random.Random | None = None, **options) -> tuple[Batcher, Metrics]:
    options = {"model_name": "m", "max_wait_ms": 0, "max_batch_size": 1, **options}
    metrics = Metrics()
    batcher = Batcher(session.run_batch, 2, ServerConfig(**options), metrics, runs=session, rng=rng)
    batcher.start()
    return batcher, metrics


def value(metrics: Metrics, name: str) -> float:
    """A sample of the batcher's metrics by its name after the ``bitnet_onnx_`` prefix."""
    return metrics.registry.get_sample_value(f"bitnet_onnx_{name}") or 0.0


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.002)


def ids_of(n: int, first: int) -> list[int]:
    """A text of ``n`` token ids starting at ``first`` (unique per test request)."""
    return list(range(first, first + n))


async def run_one_queue_one(batcher: Batcher, session: HeldSession, metrics: Metrics, running: list[list[int]],
                            queued: list[list[int]]) -> tuple[asyncio.Future, asyncio.Future]:
    """The pending answers of a request `running` (its run started, held by the session) and of one `queued`
    after it (in the queue: its tokens counted)."""
    run = asyncio.ensure_future(batcher.embed(running))
    await session.running()
    queue = asyncio.ensure_future(batcher.embed(queued))
    await until(lambda: value(metrics, "queue_tokens") == sum(map(len, queued)), "the second request queued")
    return run, queue


def test_the_line_keeps_arrival_order_so_a_big_request_is_not_overtaken():
    session = HeldSession()
    batcher, metrics = make_batcher(session, max_queue_tokens=10)

    async def go():
        # A runs, held; C is queued: 6 of 10 tokens
        a, c = await run_one_queue_one(batcher, session, metrics, [ids_of(8, 100)], [ids_of(6, 200)])
        b = asyncio.ensure_future(batcher.embed([ids_of(8, 300)]))  # 6 + 8 > 10: in line
        await until(lambda: value(metrics, "line_requests") == 1, "B in line")
        d = asyncio.ensure_future(batcher.embed([ids_of(2, 400)]))  # would fit, but B was first
        await until(lambda: value(metrics, "line_requests") == 2, "D in line behind B")
        session.release()
        return await asyncio.gather(a, c, b, d)

    try:
        answers = asyncio.run(go())
    finally:
        batcher.stop(HANG_GUARD_S)
    assert [run[0][0] for run in session.runs] == [100, 200, 300, 400]  # A, C, B, D
    for answer, (n, first) in zip(answers, [(8, 100), (6, 200), (8, 300), (2, 400)]):
        np.testing.assert_array_equal(answer, [[sum(ids_of(n, first)), n]])


def test_the_wait_in_line_is_bounded_and_the_refusal_leaves_nothing_behind():
    session = HeldSession()
    batcher, metrics = make_batcher(session, max_queue_tokens=10, max_line_wait_s=0.2)

    async def go():
        a, c = await run_one_queue_one(batcher, session, metrics, [ids_of(8, 100)], [ids_of(6, 200)])
        with pytest.raises(QueueFull) as refused:
            await batcher.embed([ids_of(8, 300)])  # waits in line 0.2 s: A is still held
        line_after = value(metrics, "line_requests")
        session.release()
        await asyncio.gather(a, c)
        return refused.value, line_after

    try:
        refused, line_after = asyncio.run(go())
    finally:
        batcher.stop(HANG_GUARD_S)
    assert 1 <= refused.retry_after <= 2 and line_after == 0
    assert [run[0][0] for run in session.runs] == [100, 200]  # the refused request never ran
    assert value(metrics, "line_duration_seconds_sum") >= 0.2


def test_a_full_line_refuses_any_request_and_admits_any_while_not_full():
    session = HeldSession()
    batcher, metrics = make_batcher(session, max_queue_tokens=10, max_line_wait_s=HANG_GUARD_S)

    async def go():
        a, c = await run_one_queue_one(batcher, session, metrics, [ids_of(8, 100)], [ids_of(9, 200)])
        # the line holds fewer than 10 tokens: a request of 14 (over the limit itself) gets in
        big = asyncio.ensure_future(batcher.embed([ids_of(7, 300), ids_of(7, 310)]))
        await until(lambda: value(metrics, "line_requests") == 1, "the big one in line")
        with pytest.raises(QueueFull):  # now the line is full: even one token is refused at once
            await batcher.embed([ids_of(1, 400)])
        session.release()
        return await asyncio.gather(a, c, big)

    try:
        _, _, big = asyncio.run(go())
    finally:
        batcher.stop(HANG_GUARD_S)
    np.testing.assert_array_equal(big, [[sum(ids_of(7, 300)), 7], [sum(ids_of(7, 310)), 7]])


def test_requests_refused_together_get_spread_retry_afters():
    session = HeldSession()
    batcher, metrics = make_batcher(session, rng=random.Random(7), max_queue_tokens=4, max_line_wait_s=0)

    async def go():
        a, queued = await run_one_queue_one(batcher, session, metrics, [ids_of(4, 100)], [ids_of(4, 200)])
        refused = []
        for i in range(40):
            with pytest.raises(QueueFull) as e:
                await batcher.embed([ids_of(2, 300 + 10 * i)])
            refused.append(e.value.retry_after)
        session.release()
        await asyncio.gather(a, queued)
        return refused

    try:
        retry_afters = asyncio.run(go())
    finally:
        batcher.stop(HANG_GUARD_S)
    # no session speed known yet: the queue "drains in 1 s", so clients are told 1 or 2 s at random
    assert set(retry_afters) == {1, 2}


def test_a_request_whose_client_went_away_is_dropped_from_queue_and_line():
    session = HeldSession()
    batcher, metrics = make_batcher(session, max_queue_tokens=10, max_line_wait_s=HANG_GUARD_S)

    async def go():
        a, queued = await run_one_queue_one(batcher, session, metrics, [ids_of(2, 100)],
                                            [ids_of(4, 200), ids_of(4, 210)])  # 8 tokens queued
        in_line = asyncio.ensure_future(batcher.embed([ids_of(5, 300)]))
        behind = asyncio.ensure_future(batcher.embed([ids_of(6, 400)]))  # 5 + 6 > 10: stays in line
        await until(lambda: value(metrics, "line_requests") == 2, "two in line")
        queued.cancel()  # its 8 tokens leave the queue: the head of the line fits now
        await until(lambda: value(metrics, "line_requests") == 1, "the line moved up")
        behind.cancel()
        await until(lambda: value(metrics, "line_requests") == 0, "the line is empty")
        session.release()
        return await asyncio.gather(a, in_line)

    try:
        asyncio.run(go())
    finally:
        batcher.stop(HANG_GUARD_S)
    assert [run[0][0] for run in session.runs] == [100, 300]
    assert value(metrics, "abandoned_inputs_total") == 3 and session.stops == 0


def test_a_run_is_stopped_only_when_every_request_in_it_has_gone():
    session = HeldSession()
    batcher, metrics = make_batcher(session, max_batch_size=8, max_wait_ms=50)

    async def go():
        alone = asyncio.ensure_future(batcher.embed([ids_of(3, 100), ids_of(3, 110)]))
        await session.running()
        alone.cancel()  # the run holds nothing else: stopped, not retried text by text
        await until(lambda: session.stops == 1, "the run stopped")
        first = asyncio.ensure_future(batcher.embed([ids_of(2, 200)]))
        second = asyncio.ensure_future(batcher.embed([ids_of(2, 300)]))
        await session.running()  # both in one run (max_wait_ms lets the second join)
        first.cancel()
        await asyncio.sleep(0.05)
        stops_with_second_waiting = session.stops
        session.release()
        return await second, stops_with_second_waiting

    try:
        second, stops_with_second_waiting = asyncio.run(go())
    finally:
        batcher.stop(HANG_GUARD_S)
    assert len(session.runs) == 2 and len(session.runs[1]) == 2  # no rerun of the stopped batch
    assert stops_with_second_waiting == 1  # the shared run went on for the second request
    np.testing.assert_array_equal(second, [[sum(ids_of(2, 300)), 2]])
    assert value(metrics, "abandoned_inputs_total") == 2 and value(metrics, "stopped_runs_total") == 1
    assert value(metrics, "inputs_total") == 2  # the shared run's two texts were embedded


def test_ort_terminate_stops_a_real_session_run_and_only_that_one(tiny_model, tiny_export):
    from bitnet_onnx import Embedder

    embedder = Embedder(tiny_export(tiny_model("qwen3"), weights="i2s"), threads=1)
    ids = embedder.tokenize(["spiders have eight legs", "a"])
    want = embedder.run_batch(ids)
    runs = StoppableRuns()  # the options of each run: the embedder's session is never swapped
    runs.begin()
    runs.stop()
    with pytest.raises(Exception, match="terminate"):
        embedder.run_batch(ids, run_options=runs.options)
    runs.begin()  # the next run is not stopped
    np.testing.assert_array_equal(embedder.run_batch(ids, run_options=runs.options), want)
