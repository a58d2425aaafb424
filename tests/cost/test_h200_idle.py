"""The real H200 recording (idle, burn, memory fill, 30 % duty cycle, idle): the idle spend it implies.

The expectation is computed from the trace's own utilization values: between two readings the
GPU costs price x (1 - utilization of the earlier reading) of idle money per hour.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from monitor.config import load_settings
from monitor.infra.replay import ReplayNvml
from monitor.runtime import Monitor
from tests.infra.fakes import FakeClock, h200_trace
from tests.infra.scrape import samples, value

PRICE = 3.5  # H200 has no default price: this test configures one
WALL = 1_767_240_000.0
EXACT = 1e-7  # wall-clock seconds near 1.8e9 carry ~2e-7 s of float rounding into each interval


def play() -> list[dict[str, float]]:
    """Tick the monitor at every record of the trace; the cost numbers after each tick."""
    trace = h200_trace()
    clock = FakeClock()
    settings = load_settings(None, {"infra": {"node": "node-a", "timeout": "300ms", "nvml": {"enabled": "true"}},
                                    "cost": {"gpu_prices": {"H200": {"usd_per_hour": PRICE}}}})

    async def run() -> list[dict[str, float]]:
        monitor = Monitor(settings, wall=lambda: WALL + clock.now, load_nvml=lambda: ReplayNvml(trace, clock))
        pages = []
        try:
            for record in trace.records:
                clock.now = record["t"]
                await monitor.run_once()
                page = samples(monitor.metrics_text().decode())
                pages.append({name: value(page, name) for name in (
                    "inference_cost_idle_usd_per_hour", "inference_cost_idle_usd_total", "inference_cost_idle_ratio",
                    "inference_cost_usd_total", "inference_cost_usd_per_hour")})
                assert value(page, "inference_cost_price_known", node="node-a", gpu="0") == 1.0
        finally:
            await monitor.aclose()
        return pages

    return asyncio.run(run())


def test_idle_spend_follows_the_trace_utilization() -> None:
    records = h200_trace().records
    pages = play()
    for record, page in zip(records, pages, strict=True):
        assert page["inference_cost_usd_per_hour"] == PRICE
        assert page["inference_cost_idle_usd_per_hour"] == pytest.approx(PRICE * (1 - record["util_gpu"] / 100))
    expected = sum(PRICE * (1 - a["util_gpu"] / 100) * (b["t"] - a["t"]) / 3600
                   for a, b in itertools.pairwise(records))
    assert pages[-1]["inference_cost_idle_usd_total"] == pytest.approx(expected, rel=EXACT)
    span = records[-1]["t"] - records[0]["t"]
    assert pages[-1]["inference_cost_usd_total"] == pytest.approx(PRICE * span / 3600, rel=EXACT)


def test_the_thirty_percent_duty_cycle_burns_seventy_percent_idle() -> None:
    records = h200_trace().records
    pages = play()
    # The duty phase: the readings between the burn (~100 %) and the final idle (0 %).
    duty = [i for i, r in enumerate(records) if 20 <= r["util_gpu"] <= 40]
    assert len(duty) >= 15 and duty == list(range(duty[0], duty[-1] + 1))
    first, last = duty[0], duty[-1]
    for i in duty:
        assert pages[i]["inference_cost_idle_ratio"] == pytest.approx(1 - records[i]["util_gpu"] / 100)
    spent_idle = pages[last]["inference_cost_idle_usd_total"] - pages[first]["inference_cost_idle_usd_total"]
    expected = sum(PRICE * (1 - records[i]["util_gpu"] / 100) * (records[i + 1]["t"] - records[i]["t"]) / 3600
                   for i in range(first, last))
    assert spent_idle == pytest.approx(expected, rel=EXACT)
    spent = pages[last]["inference_cost_usd_total"] - pages[first]["inference_cost_usd_total"]
    assert spent_idle / spent == pytest.approx(0.7, abs=0.015)  # 28-31 % busy: ~70 % of the money idles
