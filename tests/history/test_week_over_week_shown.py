"""The overview, `infermon status` (both widths) and /api/v1/status show each model's P99 TTFT
week over week, from the history a restarted monitor read back from its store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from monitor.config import load_settings
from monitor.history.store import HistoryTables
from monitor.runtime import Monitor
from monitor.store.session import Store
from monitor.web.overview import overview
from monitor.web.page import environment, render_page
from monitor.web.terminal import bars, print_overview
from tests.history.worlds import DAY, WEEK, World, creeping, seasonal, stored_days

NOW = 1_780_000_000.0


def labels(target: str, model: str) -> tuple[tuple[str, str], ...]:
    return (("model", model), ("quantile", "0.99"), ("target", target), ("window", "5m"))


@pytest.fixture
def monitor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Monitor:
    url = f"sqlite:///{tmp_path / 'infermon.db'}"
    monkeypatch.setenv("INFERMON_STORAGE__URL", url)
    world = World("inference_ttft_seconds", {
        labels("gpu-a:8000", "creeping"): creeping(seasonal(0.3), NOW - 14 * DAY, 0.04),
        labels("gpu-b:8000", "steady"): seasonal(0.3),
    })
    store = Store(url)
    HistoryTables(store.engine).write(stored_days([world], NOW - 4 * WEEK, NOW))
    store.close()
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}})
    return Monitor(settings, wall=lambda: NOW)


def test_the_overview_has_a_row_per_model_with_its_changes_and_daily_points(monitor: Monitor) -> None:
    rows = {row["model"]: row for row in overview(monitor)["trends"]}
    assert set(rows) == {"creeping", "steady"}
    creep, steady = rows["creeping"], rows["steady"]
    # +4 %/day over the last 14 days: the last 6 hours (centred 13.875 days in) against two weeks ago
    assert creep["vs_2w"] == pytest.approx(1.04 ** 13.875 - 1, abs=0.03)
    assert creep["vs_1w"] == pytest.approx(1.04 ** 7 - 1, abs=0.03)
    assert abs(steady["vs_2w"]) < 0.03 and abs(steady["vs_1w"]) < 0.03
    assert len(creep["daily"]) == 29  # 4 weeks of history in a 30-day window, today's day not begun
    assert creep["daily"][-1] > creep["daily"][0] * 1.6
    assert [r["model"] for r in overview(monitor)["trends"]] == ["creeping", "steady"]  # the biggest change first


def test_the_page_and_status_show_the_changes(monitor: Monitor) -> None:
    page = render_page(environment().get_template("overview.html"), monitor)
    row = re.search(r'<tr data-trend="gpu-a:8000/creeping">(.*?)</tr>', page, re.S)
    assert row is not None and '+72 %' in row.group(1) and 'class="n bad" data-k="vs_2w"' in row.group(1)
    assert re.search(r'<polyline points="[0-9., ]{40,}"', row.group(1))
    o = overview(monitor)
    for width in (80, 200):
        console = Console(width=width, record=True, color_system=None)
        print_overview(console, o, "http://monitor")
        text = console.export_text()
        assert "+72 %" in text and ("vs 2 weeks ago" in text or "vs 2 weeks" in text), text


def test_bars_draw_the_days_low_to_high() -> None:
    assert bars([1.0, 2.0, None, 3.0]) == "▁▅ █" and bars([]) == ""
