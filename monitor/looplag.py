"""How late the event loop wakes: a task sleeps a fixed tick and notes how far past it it woke.

Anything that holds the loop (a blocking call in a coroutine) or the GIL (the worker thread's
whole-page parses and renders) delays that wake-up by as much as it delays `/healthz`; the probe
sees it without a client. Exported as the last lag and the largest over the last minute:

    inference_monitor_event_loop_lag_seconds{stat="last"}    0.0011
    inference_monitor_event_loop_lag_seconds{stat="max_1m"}  0.3020
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Iterator
from typing import TypedDict

from prometheus_client.core import Metric

from monitor.catalog import family

TICK_SECONDS = 0.1  # 600 wake-ups a minute: cheap, and a stall of a tenth of a second shows
WINDOW_SECONDS = 60.0


class LoopLagStatus(TypedDict):
    loop: str | None  # the running loop's class
    tick_seconds: float
    last_seconds: float
    max_1m_seconds: float
    samples_1m: int


class LoopLagProbe:
    def __init__(self, tick: float = TICK_SECONDS, window: float = WINDOW_SECONDS) -> None:
        self.tick = tick
        self.window = window
        self.last = 0.0
        self.samples: deque[tuple[float, float]] = deque()  # (loop time woken, lag), oldest first
        self.loop: str | None = None  # the running loop's class (`infermon serve` takes asyncio's)
        # The loop records; the publish thread reads while it renders /metrics: a deque mutated while
        # iterated raises (seen beside two CPU hogs: the publish tick failed with a traceback).
        self._lock = threading.Lock()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.loop = f"{type(loop).__module__}.{type(loop).__qualname__}"
        while True:
            due = loop.time() + self.tick
            await asyncio.sleep(self.tick)
            self.record(loop.time(), due)

    def record(self, woke: float, due: float) -> None:
        with self._lock:
            self.last = max(0.0, woke - due)
            self.samples.append((woke, self.last))
            while self.samples and self.samples[0][0] < woke - self.window:
                self.samples.popleft()

    def max_recent(self) -> float:
        # Under `run_once` (no loop of its own) nothing ran: 0, as the scrape lag reads then.
        with self._lock:
            return max((lag for _, lag in self.samples), default=0.0)

    def status(self) -> LoopLagStatus:
        return {"loop": self.loop, "tick_seconds": self.tick, "last_seconds": round(self.last, 6),
                "max_1m_seconds": round(self.max_recent(), 6), "samples_1m": len(self.samples)}


def render_loop_lag(probe: LoopLagProbe) -> Iterator[Metric]:
    lag = family("inference_monitor_event_loop_lag_seconds")
    lag.add_sample(lag.name, {"stat": "last"}, probe.last)
    lag.add_sample(lag.name, {"stat": "max_1m"}, probe.max_recent())
    yield lag
