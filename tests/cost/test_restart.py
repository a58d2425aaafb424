"""Cumulative spend in a real SQLite file (and, where a test takes `store_url`, a real PostgreSQL):
a restart mid-day continues it, without a gap or a double count."""

from __future__ import annotations

import asyncio
import itertools
import logging
from pathlib import Path

import pytest

from monitor.config import Settings, load_settings
from monitor.runtime import Monitor
from tests.infra.scrape import samples, value

# 2026-01-01 04:00 UTC = 12:00 in Shanghai: the middle of the local day.
NOON = 1_767_240_000.0
RATE = 8 * 3.5  # eight static H200s at $3.5 an hour


def settings(tmp_path: Path, url: str | None = None, **cost: object) -> Settings:
    return load_settings(None, {
        "infra": {"nvml": {"enabled": "false"}},
        "storage": {"url": url or f"sqlite:///{tmp_path / 'spend.db'}"},
        "cost": {"timezone": "Asia/Shanghai", "daily_budget_usd": 10, "gpu_prices": {"H200": {"usd_per_hour": 3.5}},
                 "static_gpus": [{"model": "NVIDIA H200", "count": 8, "node": "rack-3"}], **cost},
    })


def run(config: Settings, times: list[float]) -> list[dict[str, float]]:
    """One Monitor (one process' worth) ticking at `times`; the cost numbers after each tick."""
    clock = [times[0]]

    async def go() -> list[dict[str, float]]:
        monitor = Monitor(config, wall=lambda: clock[0])
        pages = []
        try:
            for ts in times:
                clock[0] = ts
                await monitor.run_once()
                page = samples(monitor.metrics_text().decode())
                pages.append({name: value(page, name) for name in (
                    "inference_cost_usd_total", "inference_cost_today_usd", "inference_cost_budget_used_ratio",
                    "inference_cost_usd_per_hour")})
        finally:
            await monitor.aclose()
        return pages

    return asyncio.run(go())


def test_restart_mid_day_keeps_the_total_continuous(tmp_path: Path, store_url: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERMON_STORAGE__URL")  # the real database, not the tests' in-memory store
    config = settings(tmp_path, store_url)
    first = run(config, [NOON + 15 * i for i in range(41)])  # ten minutes
    assert first[0]["inference_cost_usd_total"] == 0.0  # the first tick starts the clock
    assert first[0]["inference_cost_usd_per_hour"] == RATE
    assert first[-1]["inference_cost_usd_total"] == pytest.approx(RATE * 600 / 3600)
    # A restart that takes 30 s; the new process ticks for five more minutes.
    restart = NOON + 600 + 30
    second = run(config, [restart + 15 * i for i in range(21)])
    # Its first tick continues the total: the 30 s of downtime at the last known rate, nothing twice.
    assert second[0]["inference_cost_usd_total"] == pytest.approx(RATE * 630 / 3600)
    assert second[-1]["inference_cost_usd_total"] == pytest.approx(RATE * (630 + 300) / 3600)
    totals = [p["inference_cost_usd_total"] for p in first + second]
    steps = [b - a for a, b in itertools.pairwise(totals)]
    assert all(step >= 0 for step in steps)  # a counter: never reset by the restart
    assert max(steps) == pytest.approx(RATE * 30 / 3600)  # the largest step is the restart's 30 s, no more
    # Today's spend is the same money (the day started before the first tick); $10 budget.
    assert second[-1]["inference_cost_today_usd"] == pytest.approx(RATE * 930 / 3600)
    assert second[-1]["inference_cost_budget_used_ratio"] == pytest.approx(RATE * 930 / 3600 / 10)


def test_a_long_outage_is_not_guessed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("INFERMON_STORAGE__URL")
    config = settings(tmp_path, max_gap="5m")
    run(config, [NOON, NOON + 60])
    with caplog.at_level(logging.WARNING, logger="monitor.cost"):
        later = run(config, [NOON + 7260, NOON + 7320])  # two hours down
    assert later[0]["inference_cost_usd_total"] == pytest.approx(RATE * 60 / 3600)  # the outage adds nothing
    assert later[1]["inference_cost_usd_total"] == pytest.approx(RATE * 120 / 3600)
    assert "not counted" in caplog.text


def test_the_budget_day_ends_at_local_midnight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERMON_STORAGE__URL")
    midnight = NOON + 12 * 3600  # 2026-01-02 00:00 in Shanghai
    pages = run(settings(tmp_path), [midnight - 120 + 30 * i for i in range(9)])  # 23:58 to 00:02
    assert pages[3]["inference_cost_today_usd"] == pytest.approx(RATE * 90 / 3600)
    assert pages[4]["inference_cost_today_usd"] == pytest.approx(0.0)  # the tick at 00:00:00
    assert pages[8]["inference_cost_today_usd"] == pytest.approx(RATE * 120 / 3600)
    assert pages[8]["inference_cost_usd_total"] == pytest.approx(RATE * 240 / 3600)
    # UTC days end elsewhere: the same ticks in one UTC day.
    utc = run(settings(tmp_path / "utc", timezone="UTC"), [midnight - 120 + 30 * i for i in range(9)])
    assert utc[8]["inference_cost_today_usd"] == pytest.approx(RATE * 240 / 3600)


def test_two_replicas_on_one_database_count_each_interval_once(tmp_path: Path, store_url: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERMON_STORAGE__URL")
    config = settings(tmp_path, store_url)
    clock = [NOON]

    async def go() -> list[float]:
        replicas = [Monitor(config, wall=lambda: clock[0]), Monitor(config, wall=lambda: clock[0])]
        totals = []
        try:
            for i in range(12):  # the two replicas tick in turn, 15 s apart
                clock[0] = NOON + 15 * i
                monitor = replicas[i % 2]
                await monitor.run_once()
                totals.append(value(samples(monitor.metrics_text().decode()), "inference_cost_usd_total"))
        finally:
            for monitor in replicas:
                await monitor.aclose()
        return totals

    totals = asyncio.run(go())
    assert totals == pytest.approx([RATE * 15 * i / 3600 for i in range(12)])
