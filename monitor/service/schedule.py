"""Each target on its own cadence: a stable offset within the interval, as Prometheus spreads scrapes.

A target is scraped at `offset + k * interval` (wall-clock seconds), the offset a hash of its
name and URL, so a thousand targets arrive a few milliseconds apart instead of all at once, and
each one keeps its slot across restarts. One coroutine launches due scrapes as tasks; a scrape
still running when its next slot comes is not doubled: that slot is skipped and counted.

    spreader = Spreader(collector, cpu)      # cpu: the one worker thread for parse and derive
    await spreader.run()                     # until cancelled

How far behind it runs is measured per scrape: the delay from its slot to its start, plus the
time its page waited for the worker thread. `status()` says whether it keeps up.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TypedDict

from prometheus_client.core import Metric

from monitor.catalog import family
from monitor.service.collector import COLLECTOR, ServiceCollector
from monitor.service.target import TargetState

log = logging.getLogger("monitor.service.schedule")
SCRAPES = "service_scrapes"  # the spread schedule's progress, as a job of its own (HealthBook.step)
_MAX_SLEEP = 1.0  # wake at least this often to pick up new targets
_LAG_OK = 0.25  # a lag below this share of the interval counts as keeping up


def offset(key: str, interval: float) -> float:
    """A stable offset in [0, interval) for this identity, in whole milliseconds."""
    span = max(1, round(interval * 1000))
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") % span) / 1000


def first_slot(now: float, offset_s: float, interval: float) -> float:
    """The first time >= now that is offset_s past a multiple of the interval."""
    return now + (offset_s - now) % interval


@dataclass(frozen=True)
class LagSample:
    at: float  # wall time the scrape ended
    lag: float


class ScheduleStatus(TypedDict):
    """The spread scrapes in /api/v1/status' "layers"."service"."schedule"."""

    mode: str
    interval_seconds: float
    targets: int
    in_flight: int
    scrapes_started_total: int
    scrapes_skipped_total: int
    lag_seconds: float
    keeping_up: bool
    message: str


class Spreader:
    def __init__(
        self,
        collector: ServiceCollector,
        cpu: Executor | None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.collector = collector
        self.cpu = cpu
        self.wall = wall
        self.interval = collector.settings.scrape_interval.seconds
        self.running: dict[str, asyncio.Task[None]] = {}
        self.scheduled: dict[str, TargetState] = {}
        self.skipped = 0
        self.started = 0
        self.finished = 0
        self._heap: list[tuple[float, str]] = []
        self._lags: deque[LagSample] = deque()
        self._seen: set[str] = set()  # targets scraped at least once since start
        self._last_skip = -math.inf
        self._version = -1  # the collector's target table version last scheduled

    def key(self, state: TargetState) -> str:
        return f"{state.target.name}\0{state.target.url}"

    def sync(self) -> None:
        """Schedule new targets at their slot; forget removed or changed ones."""
        if self._version == self.collector.version:
            return
        self._version = self.collector.version
        now = self.wall()
        current = self.collector.targets
        for name in [n for n, s in self.scheduled.items() if current.get(n) is not s]:
            del self.scheduled[name]
            self._seen.discard(name)
        for name, state in list(current.items()):
            if name not in self.scheduled:
                self.scheduled[name] = state
                slot = first_slot(now, offset(self.key(state), self.interval), self.interval)
                heapq.heappush(self._heap, (slot, name))

    def all_seen(self) -> bool:
        return all(name in self._seen for name in self.scheduled)

    async def run(self) -> None:
        try:
            while True:
                failed = True
                with self.collector.health.step(SCRAPES):  # a bug here ends one step, never the schedule
                    self.sync()
                    await self._launch_due()
                    failed = False
                if failed:  # never a busy loop on a step that fails at once
                    await asyncio.sleep(min(_MAX_SLEEP, self.interval))
        finally:
            for task in list(self.running.values()):
                task.cancel()

    async def _launch_due(self) -> None:
        if not self._heap:
            await asyncio.sleep(min(_MAX_SLEEP, self.interval))
            return
        slot, name = self._heap[0]
        now = self.wall()
        if slot > now:
            await asyncio.sleep(min(slot - now, _MAX_SLEEP))
            return
        heapq.heappop(self._heap)
        state = self.scheduled.get(name)
        if state is None or self.collector.targets.get(name) is not state:
            return  # removed or replaced: sync() schedules the new one
        following = slot + self.interval
        if following <= now:  # the loop itself fell behind by whole intervals
            missed = math.floor((now - following) / self.interval) + 1
            self._skip(missed)
            following += missed * self.interval
        heapq.heappush(self._heap, (following, name))
        if name in self.running:
            self._skip(1)  # the previous scrape of this target is still going: never two at once
            log.debug("target %s: scrape still running at its next slot, skipped", name)
            return
        self.started += 1
        task = asyncio.create_task(self._scrape(state, slot, now), name=f"scrape {name}")
        self.running[name] = task

    def _skip(self, count: int) -> None:
        self.skipped += count
        self._last_skip = self.wall()

    async def _scrape(self, state: TargetState, slot: float, started: float) -> None:
        name = state.target.name
        try:
            await self.collector.scrape(state, self.cpu)
        finally:
            self.running.pop(name, None)
            self.finished += 1
            self._seen.add(name)
            ended = self.wall()
            self._lags.append(LagSample(ended, max(0.0, started - slot) + state.cpu_wait))
            while self._lags and self._lags[0].at < ended - self.interval:
                self._lags.popleft()

    def lag(self) -> float:
        """The largest lag of the scrapes that ended within the last interval (0 when none).

        Read from the render thread too: it works on a copy, the loop alone trims the deque."""
        horizon = self.wall() - self.interval
        return max((s.lag for s in list(self._lags) if s.at >= horizon), default=0.0)

    def status(self) -> ScheduleStatus:
        lag = self.lag()
        keeping_up = lag < _LAG_OK * self.interval and self.wall() - self._last_skip >= self.interval
        message = "keeping up" if keeping_up else (
            f"falling behind: scrapes run up to {lag:.1f}s behind their slots, {self.skipped} skipped since start; "
            f"targets not scraped for {2 * self.interval:g}s show no derived series")
        return {
            "mode": "spread",
            "interval_seconds": self.interval,
            "targets": len(self.scheduled),
            "in_flight": len(self.running),
            "scrapes_started_total": self.started,
            "scrapes_skipped_total": self.skipped,
            "lag_seconds": lag,
            "keeping_up": keeping_up,
            "message": message,
        }


def render_schedule(spreader: Spreader | None) -> Iterator[Metric]:
    lag = family("inference_monitor_scrape_lag_seconds")
    skipped = family("inference_monitor_scrapes_skipped_total")
    # Without a spreader (`run_once`, `infermon check`) every target is scraped at once: nothing late.
    labels = {"collector": COLLECTOR}
    lag.add_sample(lag.name, labels, spreader.lag() if spreader else 0.0)
    skipped.add_sample(f"{skipped.name}_total", labels, float(spreader.skipped) if spreader else 0.0)
    yield lag
    yield skipped
