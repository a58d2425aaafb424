"""`infermon digest --week`: each model's week against the week before, from a store seeded with
known weeks, and the trend alerts that fired in the week."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from monitor.alerting.digest import fired_trends, weekly_digest
from monitor.alerting.store import AlertTransition
from monitor.cli import app
from monitor.history.digest import WEEK
from monitor.history.store import DAY, SLOTS, STEP, HistoryTables, StoredDay
from monitor.store.session import Store

NOW = 1_780_000_000.0  # a Thursday, 20:26 UTC
P99 = {"quantile": "0.99", "window": "5m"}


def weeks(before: float, after: float) -> Callable[[float], float]:
    """`before` until a week ago, `after` in the last week."""
    return lambda t: after if t > NOW - WEEK else before


def series(name: str, labels: dict[str, str], value: Callable[[float], float], days: int = 30) -> list[StoredDay]:
    out: dict[int, np.ndarray] = {}
    first = (int(NOW - days * DAY) // STEP + 1) * STEP
    for ts in range(first, int(NOW) + 1, STEP):
        day, slot = divmod(ts // STEP, SLOTS)
        out.setdefault(day, np.full(SLOTS, np.nan))[slot] = value(float(ts))
    return [StoredDay(name, labels, day, points) for day, points in sorted(out.items())]


def seeded() -> list[StoredDay]:
    creeping, steady = {"model": "creeping"}, {"model": "steady"}
    return [
        *series("inference_ttft_seconds", {**creeping, **P99}, weeks(0.2, 0.3)),
        # a target's series and the model's P50: not the model's P99
        *series("inference_ttft_seconds", {**creeping, **P99, "target": "a"}, weeks(9.0, 9.0)),
        *series("inference_ttft_seconds", {**creeping, "quantile": "0.5", "window": "5m"}, weeks(7.0, 7.0)),
        *series("inference_tpot_seconds", {**creeping, **P99}, weeks(0.020, 0.021)),
        *series("inference_e2e_latency_seconds", {**creeping, **P99}, weeks(4.0, 3.0)),
        *series("inference_request_error_ratio", {**creeping, "window": "5m"}, weeks(0.001, 0.002)),
        *series("inference_cost_usd_per_million_tokens", {**creeping, "window": "5m", "tokens": "generated"},
                weeks(0.5, 0.55)),
        *series("inference_cost_usd_per_million_tokens", {**creeping, "window": "5m", "tokens": "all"},
                weeks(0.1, 0.9)),
        *series("inference_quality_score_mean", creeping, weeks(4.5, 4.0)),
        *series("inference_ttft_seconds", {**steady, **P99}, weeks(0.1, 0.1), days=10),  # 10 days: 3 of last week
    ]


def transition(name: str, model: str, starts_at: float, source: str = "embedded", kind: str = "trend",
               status: str = "firing") -> AlertTransition:
    labels = {"alertname": name, "model": model, "target": "a", "severity": "warning"}
    labels |= {"kind": kind} if kind else {}
    return AlertTransition(dedup_key=f"{name}{model}{starts_at}{source}{status}", created_at=starts_at, source=source,
                           fingerprint=f"{name}{model}"[:16], status=status,
                           labels=json.dumps(labels, sort_keys=True),
                           annotations=json.dumps({"summary": f"{name} on a",
                                                   "probable_cause": "trend_cache: the cache"}),
                           starts_at=starts_at)


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'infermon.db'}"
    monkeypatch.setenv("INFERMON_STORAGE__URL", url)
    store = Store(url)
    HistoryTables(store.engine).write(seeded())
    with Session(store.engine) as session, session.begin():
        session.add_all([
            transition("TTFTP99Creep", "creeping", NOW - 2 * DAY),
            transition("TTFTP99Creep", "creeping", NOW - 2 * DAY, source="alertmanager"),  # the same alert
            transition("TTFTP99Creep", "creeping", NOW - 2 * DAY, status="resolved"),
            transition("TTFTP99Step", "creeping", NOW - 10 * DAY),  # the week before
            transition("TTFTP99High", "creeping", NOW - DAY, kind=""),  # not a trend
            transition("TPOTP99Step", "orphan", NOW - DAY),  # a model without history
        ])
    store.close()
    return url


def test_the_digest_has_each_models_week_against_the_week_before(url: str) -> None:
    store = Store(url)
    digest = weekly_digest(store.engine, NOW)
    store.close()
    models = {m.model: m for m in digest.models}
    assert list(models) == ["creeping", "orphan", "steady"]
    figures = models["creeping"].figures
    expected = {"ttft_p99_seconds": (0.3, 0.2), "tpot_p99_seconds": (0.021, 0.020), "e2e_p99_seconds": (3.0, 4.0),
                "error_ratio": (0.002, 0.001), "usd_per_million_tokens": (0.55, 0.5), "quality_score": (4.0, 4.5)}
    for name, (this, last) in expected.items():
        figure = figures[name]
        assert figure.this_week == pytest.approx(this) and figure.last_week == pytest.approx(last), name
        assert figure.ratio == pytest.approx(this / last), name
        assert len(figure.daily) == 30
        assert figure.daily[-1] == pytest.approx(this) and figure.daily[0] == pytest.approx(last)
    steady = models["steady"].figures["ttft_p99_seconds"]
    assert steady.ratio == pytest.approx(1.0) and steady.daily[:19] == [None] * 19 and None not in steady.daily[19:]
    assert models["steady"].figures["error_ratio"].ratio is None  # no points at all
    fired = models["creeping"].fired
    assert [(a.alertname, a.starts_at, a.probable_cause) for a in fired] == [
        ("TTFTP99Creep", NOW - 2 * DAY, "trend_cache: the cache")]
    assert [(a.alertname, a.model) for a in models["orphan"].fired] == [("TPOTP99Step", "orphan")]
    assert models["orphan"].figures == {}


def test_fired_trends_is_the_weeks_trend_alerts_once(url: str) -> None:
    store = Store(url)
    assert [a.alertname for a in fired_trends(store.engine, NOW - 14 * DAY, NOW)] == [
        "TTFTP99Step", "TTFTP99Creep", "TPOTP99Step"]
    store.close()


def test_the_command_writes_the_digest_as_text_and_json(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.time", lambda: NOW)
    runner = CliRunner()
    text = runner.invoke(app, ["digest", "--week"])
    assert text.exit_code == 0, text.output
    block = text.output.split("\ncreeping\n")[1].split("\n\n")[0]
    assert "P99 TTFT" in block and "300 ms" in block and "+50 %" in block and "200 ms" in block
    assert "error ratio" in block and "0.20 %" in block and "+100 %" in block
    assert "judge score" in block and "4.00" in block and "-11 %" in block
    assert "$/1M gen. tokens" in block and "+10 %" in block
    assert "TTFTP99Creep on a since" in block and "trend_cache" in block and "TTFTP99High" not in block
    assert "▁" in block and "█" in block  # the sparkline: last week low, this week high
    as_json = runner.invoke(app, ["digest", "--week", "--json"])
    assert as_json.exit_code == 0, as_json.output
    data = {m["model"]: m for m in json.loads(as_json.output)["models"]}
    assert data["creeping"]["figures"]["ttft_p99_seconds"]["ratio"] == pytest.approx(1.5)
    assert data["creeping"]["fired"][0]["alertname"] == "TTFTP99Creep"


def test_an_empty_store_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERMON_STORAGE__URL", f"sqlite:///{tmp_path / 'empty.db'}")
    result = CliRunner().invoke(app, ["digest", "--week"])
    assert result.exit_code == 0 and "No model has history" in result.output


def test_the_digest_says_a_creeps_growth_a_day_in_text_and_json(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A model creeping +3 %/day for 21 days (its fleet-wide series, as the digest reads a model):
    the creep rule's growth a day, how long, and when it crosses 1 s; a seasonal model: none."""
    from tests.history.worlds import World, creeping, seasonal, stored_days

    url = f"sqlite:///{tmp_path / 'creep.db'}"
    monkeypatch.setenv("INFERMON_STORAGE__URL", url)
    monkeypatch.setattr("time.time", lambda: NOW)
    creep_shape = creeping(seasonal(0.3), NOW - 21 * DAY, 0.03)
    world = World("inference_ttft_seconds", {
        (("model", "creeping"), ("quantile", "0.99"), ("window", "5m")): creep_shape,
        (("model", "steady"), ("quantile", "0.99"), ("window", "5m")): seasonal(0.3),
    })
    store = Store(url)
    HistoryTables(store.engine).write(stored_days([world], NOW - 30 * DAY, NOW))
    store.close()
    runner = CliRunner()
    text = runner.invoke(app, ["digest", "--week"])
    assert text.exit_code == 0, text.output
    ttft = {block.split("\n")[0]: next(line for line in block.split("\n") if "P99 TTFT" in line)
            for block in text.output.split("\n\n")[1:] if "P99 TTFT" in block}
    shown = re.search(r"([+-][0-9.]+) %/day over ([0-9.]+) days, crosses 1 s in ~([0-9.]+) days", ttft["creeping"])
    assert shown is not None, ttft["creeping"]
    assert float(shown[1]) == pytest.approx(3.0, abs=0.3) and float(shown[2]) == pytest.approx(21, abs=1.5)
    assert "%/day" not in ttft["steady"]
    data = {m["model"]: m["figures"]["ttft_p99_seconds"]
            for m in json.loads(runner.invoke(app, ["digest", "--week", "--json"]).output)["models"]}
    creep = data["creeping"]
    assert creep["per_day"] == pytest.approx(0.03, abs=0.003) and creep["growing_days"] == pytest.approx(21, abs=1.5)
    assert not creep["growing_at_least"] and creep["crosses"] == "1 s"
    level = float(np.mean([creep_shape(NOW - s) for s in range(0, 6 * 3600, STEP)]))  # the last 6 hours
    assert creep["crosses_in_days"] == pytest.approx(math.log(1 / level) / math.log(1.03), rel=0.1)
    assert data["steady"]["per_day"] is None and data["steady"]["crosses_in_days"] is None
