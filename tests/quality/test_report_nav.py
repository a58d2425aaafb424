"""The quality report's links: back to /, to the index, to the runs either side; an empty index says why."""

from __future__ import annotations

from monitor.quality.report import _nav, render_index


def test_the_dates_either_side() -> None:
    nav = _nav("2026-11-29", ["2026-11-30", "2026-11-28", "2026-11-29"])
    assert '<a href="/reports/quality/2026-11-28">← 2026-11-28</a>' in nav
    assert '<a href="/reports/quality/2026-11-30">2026-11-30 →</a>' in nav
    first = _nav("2026-11-28", ["2026-11-28", "2026-11-29"])
    assert "← 2026-" not in first and '<a href="/">← overview</a>' in first


def test_an_empty_index_says_how_to_get_a_run() -> None:
    page = render_index([])
    assert "No finished quality run yet" in page and "infermon quality run" in page
