"""The history inside the monitor: what /metrics exports becomes 5-minute points, written to the
store as they close, read back by a restarted monitor; the trend rules run when a point closes."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from monitor.history.store import HistoryTables
from monitor.runtime import Monitor
from tests.alerting.test_evaluator import RecordingSink
from tests.alerting.test_monitor_alerts import PAGE, Engine, cycles, make_monitor
from tests.service.pagegen import grow

TTFT_P99 = 'inference_ttft_seconds'
START = 1_767_300_000.0  # a multiple of 300 s: the first point closes 5 minutes in


class Serving(Engine):
    """An engine that serves: its counters grow a little with each scrape."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.scrapes = True, 0

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.scrapes += 1
        return httpx.Response(200, text=grow(PAGE, 1 + 0.02 * self.scrapes))


def kept(monitor: Monitor, name: str) -> dict[str, list[float]]:
    assert monitor.trend_history is not None
    return {track.labels.get("quantile", ""): track.values.tolist() for track in monitor.trend_history.tracks(name)
            if track.labels.get("window") == "5m"}


def test_points_are_stored_as_they_close_and_read_back_after_a_restart(store_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERMON_STORAGE__URL", store_url)
    engine, sink, clock = Serving(), RecordingSink(), [START]

    async def run() -> None:
        monitor = make_monitor(engine, sink, clock)
        assert monitor.alerting is not None and monitor.trend_history is not None
        trend = next(s for s in monitor.alerting.states if s.rule.name == "TTFTP99Creep")
        await cycles(monitor, clock, 20)  # 0 .. 285 s: the first bucket is still open
        first = trend.last_evaluation
        assert kept(monitor, TTFT_P99) == {} and first is not None and first < START + 60  # once, at start
        await cycles(monitor, clock, 22)  # past 300 s and 600 s: two points closed
        points = kept(monitor, TTFT_P99)
        # In memory: the trend rules' series (P99); the configured others (P50) only in the store.
        assert set(points) == {"0.99"} and all(len(v) == 2 for v in points.values())
        # The rule read the history when each point closed (the point at 600 s, holding the tick at
        # 600 s, closes with the next tick), not on every one of the 42 evaluations.
        assert trend.last_evaluation == START + 615
        stored = HistoryTables(monitor.store.engine).read(0, {TTFT_P99})
        assert {day.labels["quantile"] for day in stored} >= {"0.5", "0.99"}
        p99 = next(d for d in stored if d.labels["quantile"] == "0.99" and d.labels["window"] == "5m")
        assert np.count_nonzero(~np.isnan(p99.points)) == 2
        assert p99.points[~np.isnan(p99.points)].tolist() == points["0.99"]
        await monitor.aclose()

        restarted = make_monitor(engine, sink, clock)
        assert kept(restarted, TTFT_P99) == points  # the same points, before any collection
        await restarted.aclose()

    asyncio.run(run())


def test_without_a_history_the_trend_rules_are_not_evaluated(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERMON_STORAGE__URL", store_url)
    monkeypatch.setenv("INFERMON_HISTORY__ENABLED", "false")
    engine, sink, clock = Engine(), RecordingSink(), [START]

    async def run() -> None:
        monitor = make_monitor(engine, sink, clock)
        assert monitor.trend_history is None and monitor.alerting is not None
        await cycles(monitor, clock, 3)
        trend = [s for s in monitor.alerting.states if s.rule.trend]
        assert trend and all(s.last_evaluation is None for s in trend)
        assert any(s.last_evaluation is not None for s in monitor.alerting.states if not s.rule.trend)
        await monitor.aclose()

    asyncio.run(run())
