"""The demo's compressed weeks: the store the demo starts with holds three weeks in which the
simulated engine's latency creeps; the demo's own rules, evaluated once on it, raise the creep on
that engine only, with its cause, and the overview shows the change and the days."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.demo import demo_settings, seed_decay_week
from monitor.runtime import Monitor
from monitor.sim.demo_cycle import demo_rules
from monitor.sim.demo_week import CREEP_DAYS, DEMO_WEEK_ENGINES
from monitor.web.overview import overview

HOUR = 3600.0
CREEPING, STEADY = (engine.target for engine in DEMO_WEEK_ENGINES)


def demo_monitor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, now: float) -> Monitor:
    state = tmp_path / "demo.db"
    monkeypatch.setenv("INFERMON_STORAGE__URL", f"sqlite:///{state}")
    settings = demo_settings("http://127.0.0.1:9", 9480, state=state, rules=demo_rules(tmp_path / "rules"))
    return Monitor(settings, wall=lambda: now)


# a Thursday evening, a Sunday night and a Sunday morning (UTC): the rhythm of the week cancels
@pytest.mark.parametrize("now", [1_780_000_000.0, 1_779_660_000.0, 1_779_585_000.0])
def test_the_creep_fires_on_the_creeping_engine_only_with_its_cause(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, now: float) -> None:
    monitor = demo_monitor(tmp_path, monkeypatch, now)
    assert seed_decay_week(monitor) > 0
    assert monitor.alerting is not None
    monitor.alerting.collected = lambda metric, at: True  # (the demo evaluates after its first scrape)
    alerts = [a for a in monitor.alerting.evaluate({}, now) if a.labels.get("kind") == "trend"]
    fired = {(a.labels["alertname"], a.labels["target"]) for a in alerts}
    assert fired == {("TTFTP99Creep", CREEPING), ("TPOTP99Creep", CREEPING)}  # no forecast: far below 1 s
    for alert in alerts:
        assert alert.annotations["probable_cause"].startswith("trend_cache:"), alert.annotations
        assert "vs. the same hours a week ago: requests/s:" in alert.annotations["context"]


def test_the_overview_shows_the_weeks_and_a_restart_keeps_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = 1_780_000_000.0
    monitor = demo_monitor(tmp_path, monkeypatch, now)
    written = seed_decay_week(monitor)
    rows = {row["target"]: row for row in overview(monitor)["trends"]}
    assert set(rows) == {CREEPING, STEADY}
    creeping = DEMO_WEEK_ENGINES[0]
    # the last 6 hours, centred 3 hours back, grown CREEP_DAYS less 3 hours at 4 %/day; the same hours
    # one and two weeks before were flat (the rhythm cancels; noise ±2 %)
    grown = (1 + creeping.creep_per_day) ** (CREEP_DAYS - 0.125)
    assert rows[CREEPING]["vs_2w"] == pytest.approx(grown - 1, abs=0.02)
    assert rows[CREEPING]["vs_1w"] == pytest.approx(grown - 1, abs=0.02)
    assert abs(rows[STEADY]["vs_2w"]) < 0.02 and abs(rows[STEADY]["vs_1w"]) < 0.02
    assert rows[CREEPING]["now"] == pytest.approx(creeping.ttft_p99, rel=0.15)  # ends at the live level
    daily = rows[CREEPING]["daily"]
    assert len(daily) == 22 and daily[-1] > daily[0] * 1.2  # three weeks and today's part, rising
    # the demo started again on the kept state (--keep-state): its own history stays as it is
    again = demo_monitor(tmp_path, monkeypatch, now + HOUR)
    assert written > 0 and seed_decay_week(again) == 0
    assert {row["target"] for row in overview(again)["trends"]} == {CREEPING, STEADY}
