"""The weekly digest's numbers: each model's week against the week before, from the stored history.

What an SRE reads on Monday in a "what is slowly getting worse" ticket: per model, the mean of
its P99 TTFT, TPOT and E2E latency, error ratio, $/1M generated tokens and judge score over the
last 7 days against the 7 days before (whole weeks: a daily and weekly rhythm cancels out), the
daily medians of the last 30 days for a sparkline, where the creep rule's condition holds on the
model's series its growth a day, for how long and when it crosses the paging threshold
(`slope.py`: the rule's own PromQL, over the stored days), and the trend alerts (creeps and steps)
that fired in the week. The model's own series are read (the fleet-wide figure of the model, without a
`target` label), as the monitor exports them and the history stores them (`history.series`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from monitor.history.slope import Key, Slope, StoredHistory, fleet, of_metric, pick, row_fields, slopes
from monitor.history.store import DAY, SLOTS, STEP, HistoryTables, StoredDay

WEEK = 7 * DAY
SPARKLINE_DAYS = 30

# figure -> the metric and the labels of its series (beside `model`, and no `target`)
FIGURES: dict[str, tuple[str, Mapping[str, str]]] = {
    "ttft_p99_seconds": ("inference_ttft_seconds", {"quantile": "0.99", "window": "5m"}),
    "tpot_p99_seconds": ("inference_tpot_seconds", {"quantile": "0.99", "window": "5m"}),
    "e2e_p99_seconds": ("inference_e2e_latency_seconds", {"quantile": "0.99", "window": "5m"}),
    "error_ratio": ("inference_request_error_ratio", {"window": "5m"}),
    "usd_per_million_tokens": ("inference_cost_usd_per_million_tokens", {"window": "5m", "tokens": "generated"}),
    "quality_score": ("inference_quality_score_mean", {}),
}


@dataclass(frozen=True)
class Figure:
    this_week: float | None  # mean of the points in (now - 7 d, now]
    last_week: float | None  # ... in (now - 14 d, now - 7 d]
    daily: list[float | None]  # the median of each UTC day's points, the last SPARKLINE_DAYS days
    slope: Slope | None = None  # its trend quantity's growth a day, for how long, its crossing
    crosses: str = ""  # the threshold the crossing is told against ("1 s")

    @property
    def ratio(self) -> float | None:
        """This week over last week; None without both (or last week at 0 and this week not)."""
        if self.this_week is None or self.last_week is None:
            return None
        if self.last_week == 0:
            return 1.0 if self.this_week == 0 else None
        return self.this_week / self.last_week

    @property
    def per_day(self) -> float | None:
        """The growth a day (0.03: +3 %/day) where the creep rule's condition holds, else None."""
        return self.slope.per_day if self.slope is not None else None


@dataclass(frozen=True)
class FiredTrend:
    """A trend alert that fired in the week (from the alert transitions)."""

    alertname: str
    model: str
    target: str
    starts_at: float
    summary: str = ""
    probable_cause: str = ""


@dataclass(frozen=True)
class ModelWeek:
    model: str
    figures: dict[str, Figure]
    fired: list[FiredTrend] = field(default_factory=list)


@dataclass(frozen=True)
class Digest:
    now: float
    models: list[ModelWeek]


def model_weeks(days: Iterable[StoredDay], now: float) -> list[ModelWeek]:
    """Every model with a point of some figure in the last two weeks, sorted by name."""
    points: dict[tuple[str, str], list[StoredDay]] = {}
    for stored in days:
        figure = _figure_of(stored)
        if figure is not None:
            points.setdefault((stored.labels["model"], figure), []).append(stored)
    models = sorted({model for model, _ in points})
    found = _slopes(points, now)
    out = []
    for model in models:
        figures = {name: _figure(points.get((model, name), []), now) for name in FIGURES}
        for name, (by_key, crosses) in found.items():
            slope = pick(by_key, {"model": model})
            if slope is not None:
                shown = crosses if slope.crosses_in_days is not None else ""
                figures[name] = replace(figures[name], slope=slope, crosses=shown)
        if any(f.this_week is not None or f.last_week is not None for f in figures.values()):
            out.append(ModelWeek(model, figures))
    return out


def _slopes(points: Mapping[tuple[str, str], list[StoredDay]], now: float) -> dict[str, tuple[dict[Key, Slope], str]]:
    """figure -> every model's slope of its trend quantity (over the fleet-wide series), and the
    threshold its crossing is told against; for the figures with a growth a day as a fraction."""
    out = {}
    for name, (metric, _) in FIGURES.items():
        q = of_metric(metric)
        days = [d for (_, figure), found in points.items() if figure == name for d in found]
        if q is None or not days:
            continue
        forecast = fleet(q).forecast
        out[name] = (slopes(StoredHistory(days), fleet(q), now, forecast.threshold if forecast else None),
                     forecast.shown if forecast else "")
    return out


def read_weeks(tables: HistoryTables, now: float) -> list[ModelWeek]:
    first = int(now // DAY) - SPARKLINE_DAYS
    return model_weeks(tables.read(first, {name for name, _ in FIGURES.values()}), now)


def _figure_of(stored: StoredDay) -> str | None:
    labels = stored.labels
    if not labels.get("model") or labels.get("target"):
        return None
    for name, (metric, wanted) in FIGURES.items():
        if metric == stored.name and all(labels.get(k) == v for k, v in wanted.items()):
            return name
    return None


def _figure(days: list[StoredDay], now: float) -> Figure:
    times, values = _points(days)
    today = int(now // DAY)
    daily: list[float | None] = []
    for day in range(today - SPARKLINE_DAYS + 1, today + 1):
        chosen = values[(times > day * DAY) & (times <= min(now, (day + 1) * DAY))]
        daily.append(float(np.median(chosen)) if len(chosen) else None)
    return Figure(_mean(times, values, now - WEEK, now), _mean(times, values, now - 2 * WEEK, now - WEEK), daily)


def _points(days: list[StoredDay]) -> tuple[np.ndarray, np.ndarray]:
    """The points of a model's series (two series of one figure, say a relabelled one, pooled)."""
    times, values = [], []
    for stored in days:
        kept = ~np.isnan(stored.points)
        times.append((stored.day * SLOTS + np.nonzero(kept)[0]) * float(STEP))
        values.append(stored.points[kept])
    if not times:
        return np.empty(0), np.empty(0)
    return np.concatenate(times), np.concatenate(values)


def _mean(times: np.ndarray, values: np.ndarray, start: float, end: float) -> float | None:
    chosen = values[(times > start) & (times <= end)]
    return float(np.mean(chosen)) if len(chosen) else None


def as_json(digest: Digest) -> dict[str, object]:
    return {"now": digest.now, "models": [
        {"model": m.model,
         "figures": {name: {"this_week": _number(f.this_week), "last_week": _number(f.last_week),
                            "ratio": _number(f.ratio), "daily": f.daily, **row_fields(f.slope, f.crosses)}
                     for name, f in m.figures.items()},
         "fired": [vars(alert) for alert in m.fired]} for m in digest.models]}


def _number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value
