"""The event-loop lag probe: a blocked loop shows in the metric and in /api/v1/status."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import httpx
import pytest

from monitor.app import create_app
from monitor.config import load_settings
from monitor.looplag import LoopLagProbe, render_loop_lag
from monitor.runtime import Monitor

BLOCK_SECONDS = 0.3


def least_lag(tick: float) -> float:
    """A block of BLOCK_SECONDS delays the wake-up by at least itself less the tick's remainder."""
    return BLOCK_SECONDS - tick - 0.005


async def _wait_for(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def _samples(probe: LoopLagProbe) -> dict[str, float]:
    return {sample.labels["stat"]: sample.value for family in render_loop_lag(probe) for sample in family.samples}


def test_a_blocked_loop_shows_as_lag() -> None:
    probe = LoopLagProbe(tick=0.02)

    async def scenario() -> dict[str, float]:
        task = asyncio.create_task(probe.run())
        await _wait_for(lambda: len(probe.samples) >= 3)  # running
        time.sleep(BLOCK_SECONDS)  # a blocking call inside a coroutine holds the whole loop
        await _wait_for(lambda: probe.max_recent() >= least_lag(probe.tick))
        task.cancel()
        return _samples(probe)

    samples = asyncio.run(scenario())
    assert samples["max_1m"] >= least_lag(0.02)
    assert samples["last"] <= samples["max_1m"]


def test_the_minute_forgets_an_old_stall() -> None:
    probe = LoopLagProbe(tick=0.1, window=60)
    probe.record(woke=100.4, due=100.0)  # a 0.4 s stall
    probe.record(woke=130.1, due=130.1)
    assert probe.max_recent() == pytest.approx(0.4)
    probe.record(woke=161.0, due=161.0)  # more than a minute after the stall
    assert probe.max_recent() == 0.0 and probe.last == 0.0


def test_served_monitor_exports_the_stall_and_shows_it_in_status() -> None:
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}, "interval": "1s"},
                                    "service": {"scrape_interval": "1s"},
                                    "storage": {"url": "sqlite://"}, "alerting": {"enabled": False}})
    monitor = Monitor(settings)
    app = create_app(monitor)

    async def scenario() -> tuple[dict[str, object], str]:
        async with app.router.lifespan_context(app):
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://monitor")
            await _wait_for(lambda: len(monitor.loop_lag.samples) >= 3)
            time.sleep(BLOCK_SECONDS)
            await _wait_for(lambda: monitor.loop_lag.max_recent() >= least_lag(0.1))
            status = (await client.get("/api/v1/status")).json()["event_loop"]
            page = ""
            deadline = time.monotonic() + 10
            while _max_on_page(page) < least_lag(0.1):  # /metrics is re-rendered each publish tick
                assert time.monotonic() < deadline, page[-2000:]
                await asyncio.sleep(0.1)
                page = (await client.get("/metrics")).text
            # Each job of the worker thread (scrapes, publishes) froze what was alive (monitor/heap.py).
            await _wait_for(lambda: monitor.heap.ticks >= 2)
            heap = (await client.get("/api/v1/status")).json()["heap"]
            assert heap["frozen_at_last_full_collection"] > 0 and heap["frozen_after_jobs"] >= 2
            await client.aclose()
            return status, page

    status, page = asyncio.run(scenario())
    assert float(status["max_1m_seconds"]) >= least_lag(0.1)  # type: ignore[arg-type]
    assert status["tick_seconds"] == 0.1
    assert 'inference_monitor_event_loop_lag_seconds{stat="last"}' in page


def _max_on_page(page: str) -> float:
    for line in page.splitlines():
        if line.startswith('inference_monitor_event_loop_lag_seconds{stat="max_1m"}'):
            return float(line.split()[-1])
    return 0.0


def test_the_publish_thread_reads_while_the_loop_records() -> None:
    # The loop records; the publish thread renders max_1m at the same time. Unlocked, iterating the
    # deque while it was appended to raised "deque mutated during iteration" (a hog run's demo log).
    probe = LoopLagProbe(tick=0.001, window=0.05)
    stop = threading.Event()

    def record() -> None:
        woke = 0.0
        while not stop.is_set():
            woke += 0.001
            probe.record(woke, woke - 0.0005)

    writer = threading.Thread(target=record)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    writer.start()
    try:
        started = time.monotonic()
        while not probe.samples:  # the writer's first record (a busy machine starts a thread late)
            assert time.monotonic() < started + 30, "the writer never recorded"
            time.sleep(0.001)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert probe.max_recent() == pytest.approx(0.0005, abs=1e-9)
    finally:
        stop.set()
        writer.join()
        sys.setswitchinterval(previous)
