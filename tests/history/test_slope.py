"""A creep's growth a day, how long it has grown and when it crosses the paging threshold: the
creep rule's own PromQL over the history, shown by the overview rows, `infermon status`, the
weekly digest and the trend alert's context."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from monitor.alerting.explain import explain
from monitor.config import CauseSettings, load_settings
from monitor.history.digest import Digest, as_json, model_weeks
from monitor.history.keeper import HistoryKeeper, Wanted
from monitor.history.slope import quantity, slope_of
from monitor.history.store import HistoryTables
from monitor.history.summary import trend_rows
from monitor.runtime import Monitor
from monitor.store.session import Store
from monitor.web.digest import digest_text
from monitor.web.overview import overview
from monitor.web.page import environment, render_page
from monitor.web.terminal import _trend_lines, _trends, print_overview
from tests.alerting.contextviews import gpu, target, views
from tests.history.worlds import DAY, WEEK, World, creeping, seasonal, stepped, stored_days

NOW = 1_780_000_000.0
TTFT = "inference_ttft_seconds"


def labels(target_name: str, model: str) -> tuple[tuple[str, str], ...]:
    return (("model", model), ("quantile", "0.99"), ("target", target_name), ("window", "5m"))


def fleet(model: str) -> tuple[tuple[str, str], ...]:
    return (("model", model), ("quantile", "0.99"), ("window", "5m"))


WORLD = World(TTFT, {
    labels("gpu-a:8000", "creeping"): creeping(seasonal(0.3), NOW - 21 * DAY, 0.03),
    labels("gpu-b:8000", "steady"): seasonal(0.3),
    fleet("creeping"): creeping(seasonal(0.3), NOW - 21 * DAY, 0.03),
    fleet("steady"): seasonal(0.3),
})


@pytest.fixture(scope="module")
def history() -> HistoryKeeper:
    keeper = HistoryKeeper([Wanted(TTFT)], memory_days=36)
    keeper.load(stored_days([WORLD], NOW - 5 * WEEK, NOW), NOW)
    return keeper


def test_a_three_week_creep_shows_its_rate_its_age_and_its_crossing(history: HistoryKeeper) -> None:
    slope = slope_of(history, quantity("TTFTP99"), {"target": "gpu-a:8000"}, NOW, 1.0)
    assert slope is not None and slope.per_day is not None and slope.now is not None
    assert slope.per_day == pytest.approx(0.03, abs=0.003)
    assert slope.days == pytest.approx(21, abs=1.5) and not slope.at_least
    assert slope.crosses_in_days == pytest.approx(math.log(1 / slope.now) / math.log(1.03), rel=0.1)
    steady = slope_of(history, quantity("TTFTP99"), {"target": "gpu-b:8000"}, NOW, 1.0)
    assert steady is not None and steady.per_day is None and steady.crosses_in_days is None


def test_the_rows_and_status_say_it_and_a_flat_model_shows_no_slope(history: HistoryKeeper) -> None:
    rows = {row["model"]: row for row in trend_rows(history, NOW)}
    assert rows["creeping"]["per_day"] == pytest.approx(0.03, abs=0.003) and rows["creeping"]["crosses"] == "1 s"
    assert rows["steady"]["per_day"] is None
    o = {"trends": list(rows.values())}
    for width, shown in ((80, _trend_lines(o)), (200, [_trends(o)])):  # status at both widths
        console = Console(width=width, record=True, color_system=None)
        for part in shown:
            console.print(part)
        text = console.export_text()
        assert "+3.0 %/day over 21 days" in text and "crosses 1 s in ~" in text, text
        assert "+0.0 %/day" not in text


def test_the_digest_carries_the_growth_a_day_in_text_and_json() -> None:
    digest = Digest(NOW, model_weeks(stored_days([WORLD], NOW - 30 * DAY, NOW), NOW))
    figures = {m.model: m.figures["ttft_p99_seconds"] for m in digest.models}
    assert figures["creeping"].per_day == pytest.approx(0.03, abs=0.003) and figures["steady"].per_day is None
    assert "%/day over " in digest_text(digest)
    shown = {m["model"]: m["figures"]["ttft_p99_seconds"] for m in as_json(digest)["models"]}  # type: ignore[index, union-attr, attr-defined]
    assert shown["creeping"]["per_day"] == pytest.approx(0.03, abs=0.003) and shown["steady"]["per_day"] is None


def test_the_creep_alerts_context_says_how_fast_how_long_and_when_it_pages(history: HistoryKeeper) -> None:
    alert = {"alertname": "TTFTP99Creep", "layer": "service", "kind": "trend", "target": "gpu-a:8000",
             "model": "creeping", "quantile": "0.99", "window": "5m"}
    context = explain(alert, replace(views([target("gpu-a:8000")], [gpu("0")]), history=history, at=NOW),
                      CauseSettings())["context"]
    line = next(line for line in context.splitlines() if line.startswith("growth: "))
    assert line.startswith("growth: P99 TTFT +3.0 %/day over 21 days, ") and " now, crosses 1 s in ~" in line
    step = {**alert, "alertname": "TTFTP99Step"}
    stepped = explain(step, replace(views([target("gpu-a:8000")], [gpu("0")]), history=history, at=NOW),
                      CauseSettings())["context"]
    assert "growth: " not in stepped  # a step has a level, not a rate


# --- a monitor restarted over four stored weeks (as tests/history/test_week_over_week_shown.py) ------

FOUR_WEEKS = World(TTFT, {
    labels("gpu-a:8000", "creeping"): creeping(seasonal(0.3), NOW - 21 * DAY, 0.03),
    labels("gpu-c:8000", "young"): creeping(seasonal(0.3), NOW - 10 * DAY, 0.03),
    labels("gpu-b:8000", "steady"): seasonal(0.3),
    labels("gpu-d:8000", "stepped"): stepped(seasonal(0.3), NOW - 4 * DAY, 1.3),
})
SHOWN = re.compile(r"([+-][0-9.]+) %/day over (at least )?([0-9.]+) days?")


@pytest.fixture
def monitor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Monitor:
    url = f"sqlite:///{tmp_path / 'infermon.db'}"
    monkeypatch.setenv("INFERMON_STORAGE__URL", url)
    store = Store(url)
    HistoryTables(store.engine).write(stored_days([FOUR_WEEKS], NOW - 4 * WEEK, NOW))
    store.close()
    return Monitor(load_settings(None, {"infra": {"nvml": {"enabled": "false"}}}), wall=lambda: NOW)


def _crossing(now: float) -> float:
    return math.log(1 / now) / math.log(1.03)


def test_four_stored_weeks_give_the_rate_the_age_and_the_crossing(monitor: Monitor) -> None:
    rows = {row["model"]: row for row in overview(monitor)["trends"]}
    creep, young = rows["creeping"], rows["young"]
    assert creep["per_day"] == pytest.approx(0.03, abs=0.003)
    # four weeks: the ratio 21 days back needs the week before the creep began, which the history lacks
    assert creep["growing_days"] == pytest.approx(21, abs=1.5) and creep["growing_at_least"]
    assert creep["crosses_in_days"] == pytest.approx(_crossing(creep["now"]), rel=0.1) and creep["crosses"] == "1 s"
    assert young["per_day"] == pytest.approx(0.03, abs=0.003)
    assert young["growing_days"] == pytest.approx(10, abs=1.5) and not young["growing_at_least"]
    for flat in ("steady", "stepped"):  # a seasonal model and a step: no growth a day
        assert rows[flat]["per_day"] is None and rows[flat]["growing_days"] is None, flat
        assert rows[flat]["crosses_in_days"] is None and rows[flat]["crosses"] is None, flat


def _says(text: str, days: float) -> None:
    shown = SHOWN.search(text)
    assert shown is not None, text
    assert float(shown[1]) == pytest.approx(3.0, abs=0.3) and float(shown[3]) == pytest.approx(days, abs=1.5), text


def test_the_page_status_and_api_show_it_and_nothing_for_a_flat_model(monitor: Monitor) -> None:
    page = render_page(environment().get_template("overview.html"), monitor)
    rows = dict(re.findall(r'<tr data-trend="([^"]+)">(.*?)</tr>', page, re.S))
    _says(rows["gpu-a:8000/creeping"], 21)
    _says(rows["gpu-c:8000/young"], 10)
    when = re.search(r"crosses 1 s in ~([0-9.]+) days", rows["gpu-a:8000/creeping"])
    creep = next(r for r in overview(monitor)["trends"] if r["model"] == "creeping")
    assert when is not None and float(when[1]) == pytest.approx(_crossing(creep["now"]), rel=0.1)
    assert "%/day" not in rows["gpu-b:8000/steady"] and "%/day" not in rows["gpu-d:8000/stepped"]
    o = overview(monitor)
    for width in (80, 200):
        console = Console(width=width, record=True, color_system=None)
        print_overview(console, o, "http://monitor")
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= width
        _says(text, 21)
        assert "crosses 1 s in ~" in text and "+0.0 %/day" not in text, text
        assert len(SHOWN.findall(text)) == 2, text  # the two creeps, not the steady or the stepped model
    answered = json.loads(json.dumps(monitor.status()))["overview"]["trends"]  # what /api/v1/status answers
    by_model = {row["model"]: row for row in answered}
    assert by_model["creeping"]["per_day"] == pytest.approx(0.03, abs=0.003)
    assert by_model["steady"]["per_day"] is None
