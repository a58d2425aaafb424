"""Week over week, per target and model: what the overview, `infermon status` and the API show.

For each model's P99 TTFT the history keeps in memory: its mean over the last 6 hours, the same
hours one and two weeks before (as changes: +0.68 is "+68 % vs 2 weeks ago"), and one point a day
(the day's median) for a sparkline of up to 30 days; where the TTFT creep rule's condition holds, its
growth a day, for how long it has grown and when it crosses the paging threshold (`slope.py`).
"""

from __future__ import annotations

import math

import numpy as np

from monitor.history.keeper import RECENT, WEEK, HistoryKeeper, week_over_week
from monitor.history.slope import SlopeFields, pick, quantity, row_fields, slopes
from monitor.history.store import DAY
from monitor.rulefiles.promql import HistoryAt

SPARKLINE_DAYS = 30  # (the history keeps a day more of the series shown)
TTFT = "inference_ttft_seconds"
SHOWN = {"quantile": "0.99", "window": "5m"}
CREEP = quantity("TTFTP99")  # its forecast: the threshold the crossing time is told against


class TrendRow(SlopeFields):
    """One target and model's P99 TTFT week over week (changes as fractions: +0.68 is +68 %)."""

    target: str
    model: str | None
    metric: str
    now: float  # the mean over the last 6 hours
    vs_1w: float | None
    vs_2w: float | None
    daily: list[float | None]  # each UTC day's median, oldest first


def trend_rows(history: HistoryKeeper | None, now: float, here: HistoryAt | None = None) -> list[TrendRow]:
    """One row per target and model with a P99 TTFT in the history, sorted by the 2-week change.
    `here`: the history read at `now` the trend rules were evaluated on (the slope reads its levels)."""
    if history is None:
        return []
    rows: list[TrendRow] = []
    forecast = CREEP.forecast
    shown = forecast.shown if forecast else ""
    found = slopes(history, CREEP, now, forecast.threshold if forecast else None, here)
    for track in history.tracks(TTFT):
        labels = track.labels
        if any(labels.get(k) != v for k, v in SHOWN.items()) or not labels.get("target"):
            continue
        recent = track.values[np.searchsorted(track.ts, now - RECENT, side="left"):]
        if not len(recent):
            continue
        match = {"target": labels["target"], "model": labels.get("model", ""), **SHOWN}
        week = week_over_week(history, TTFT, match, now)
        two = week_over_week(history, TTFT, match, now, back=2 * WEEK)
        rows.append({"target": labels["target"], "model": labels.get("model"), "metric": "ttft_p99_seconds",
                     "now": float(np.mean(recent)), "vs_1w": _change(week), "vs_2w": _change(two),
                     "daily": _daily(track.ts, track.values, now), **row_fields(pick(found, match), shown)})
    return sorted(rows, key=lambda r: (-(r["vs_2w"] if r["vs_2w"] is not None else -math.inf), r["target"]))


def _change(ratio: float | None) -> float | None:
    return None if ratio is None or not math.isfinite(ratio) else ratio - 1


def _daily(times: np.ndarray, values: np.ndarray, now: float) -> list[float | None]:
    """The median of each UTC day's points, oldest first, up to SPARKLINE_DAYS days (None: no point)."""
    today = int(now // DAY)
    days = (times // DAY).astype(int)
    out: list[float | None] = []
    for day in range(today - SPARKLINE_DAYS + 1, today + 1):
        chosen = values[days == day]
        out.append(float(np.median(chosen)) if len(chosen) else None)
    while out and out[0] is None:
        out.pop(0)
    return out
