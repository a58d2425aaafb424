"""Windows of snapshots -> the service numbers we export, per target x model and fleet-wide.

Every number is the PromQL expression an operator would write, evaluated on the samples we
scraped:

    requests/s        sum by (model) (rate(requests[w]))
    TTFT P99          histogram_quantile(0.99, sum by (le, model) (rate(ttft_bucket[w])))
    error ratio       sum(rate(errors[w])) / sum(rate(requests[w]))
    baseline ratio    rate(generation_tokens[w]) / rate(generation_tokens[B] offset w)

Fleet-wide numbers sum the per-target rates; quantiles sum bucket rates across targets on
the bucket bounds every target has (summing pages with different bounds would be wrong).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from monitor.promtext import Labels
from monitor.service.extract import Snapshot
from monitor.service.promql import (
    Point,
    extrapolated_rate,
    fraction_at_or_below,
    histogram_quantile,
)

QUANTILES = (0.5, 0.95, 0.99)
RATE_METRICS = ("requests", "errors", "prompt_tokens", "generation_tokens", "preemptions")
HISTOGRAMS = ("ttft", "tpot", "e2e", "queue")

LeRates = dict[float, float]


@dataclass(frozen=True)
class Window:
    label: str  # as configured: "30s", "1m", "5m"
    seconds: float


@dataclass(frozen=True)
class Objectives:
    ttft_seconds: float = 0.2
    tpot_seconds: float = 0.05


@dataclass
class Rates:
    """Raw per-second rates of one target x model (or one model fleet-wide) over one window."""

    counters: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, LeRates] = field(default_factory=dict)
    http_errors: float | None = None
    http_all: float | None = None
    baseline_generation: float | None = None


@dataclass
class WindowStats:
    requests_per_second: float | None = None
    error_ratio: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    preemptions_per_second: float | None = None
    throughput_baseline_ratio: float | None = None
    quantiles: dict[str, dict[float, float]] = field(default_factory=dict)
    slo_attainment: dict[str, float] = field(default_factory=dict)


def window_rates(
    history: Sequence[Snapshot],
    end: float,
    window: Window,
    baseline: Sequence[Snapshot] = (),
    baseline_seconds: float = 0.0,
) -> dict[str, Rates]:
    """Per-model rates of one target over [end - window, end] (Prometheus 2.x: both ends closed).

    `baseline` holds older, thinned snapshots (generation tokens only) for the trailing
    throughput baseline over the `baseline_seconds` before the window.
    """
    start = end - window.seconds
    inside = [s for s in history if start <= s.ts <= end]
    per_model: dict[str, Rates] = {}
    for metric, by_model in _counter_points(inside).items():
        for model, series in by_model.items():
            total = _sum_rates(series.values(), start, end)
            if total is not None:
                per_model.setdefault(model, Rates()).counters[metric] = total
    for metric, by_model_le in _bucket_points(inside).items():
        for model, bucket_series in by_model_le.items():
            le_rates = _sum_rates_by_le(bucket_series, start, end)
            if le_rates:
                per_model.setdefault(model, Rates()).buckets[metric] = le_rates
    _attach_http(per_model, inside, start, end)
    if baseline_seconds > 0:
        _attach_baseline(per_model, baseline, start, baseline_seconds)
    return per_model


def stats_from_rates(rates: Rates, objectives: Objectives) -> WindowStats:
    counters = rates.counters
    stats = WindowStats(
        requests_per_second=counters.get("requests"),
        prompt_tokens_per_second=counters.get("prompt_tokens"),
        generation_tokens_per_second=counters.get("generation_tokens"),
        preemptions_per_second=counters.get("preemptions"),
    )
    stats.error_ratio = _error_ratio(rates)
    generation = counters.get("generation_tokens")
    if generation is not None and rates.baseline_generation:
        stats.throughput_baseline_ratio = generation / rates.baseline_generation
    for metric, le_rates in rates.buckets.items():
        buckets = sorted(le_rates.items())
        values = {q: histogram_quantile(q, buckets) for q in QUANTILES}
        finite = {q: v for q, v in values.items() if not math.isnan(v)}
        if finite:
            stats.quantiles[metric] = finite
    for metric, threshold in (("ttft", objectives.ttft_seconds), ("tpot", objectives.tpot_seconds)):
        if metric in rates.buckets:
            share = fraction_at_or_below(threshold, sorted(rates.buckets[metric].items()))
            if not math.isnan(share):
                stats.slo_attainment[metric] = share
    return stats


def fleet_rates(per_target: Iterable[dict[str, Rates]]) -> dict[str, Rates]:
    """Sum per-target rates by model; buckets only on the bounds that every target has."""
    fleet: dict[str, Rates] = {}
    bounds: dict[tuple[str, str], set[float]] = {}
    for target in per_target:
        for model, rates in target.items():
            total = fleet.setdefault(model, Rates())
            for metric, value in rates.counters.items():
                total.counters[metric] = total.counters.get(metric, 0.0) + value
            for metric, le_rates in rates.buckets.items():
                shared = bounds.setdefault((model, metric), set(le_rates))
                shared &= set(le_rates)
                summed = total.buckets.setdefault(metric, {})
                for le, value in le_rates.items():
                    summed[le] = summed.get(le, 0.0) + value
            total.http_errors = _add(total.http_errors, rates.http_errors)
            total.http_all = _add(total.http_all, rates.http_all)
            total.baseline_generation = _add(total.baseline_generation, rates.baseline_generation)
    for (model, metric), shared in bounds.items():
        summed = fleet[model].buckets[metric]
        fleet[model].buckets[metric] = {le: v for le, v in summed.items() if le in shared}
    return fleet


def _error_ratio(rates: Rates) -> float | None:
    # The engine's count (finished with an error) and the HTTP layer's (5xx) see overlapping
    # failures; the ratio is the worse of the two, never their sum.
    ratios = []
    requests = rates.counters.get("requests")
    if requests:
        ratios.append(rates.counters.get("errors", 0.0) / requests)
    if rates.http_all:
        ratios.append((rates.http_errors or 0.0) / rates.http_all)
    return max(ratios) if ratios else None


def _add(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else a + b


def _counter_points(inside: Sequence[Snapshot]) -> dict[str, dict[str, dict[Labels, list[Point]]]]:
    points: dict[str, dict[str, dict[Labels, list[Point]]]] = {}
    for snap in inside:
        for metric, by_model in snap.counters.items():
            metric_points = points.setdefault(metric, {})
            for model, series in by_model.items():
                model_points = metric_points.setdefault(model, {})
                for labels, value in series.items():
                    model_points.setdefault(labels, []).append((snap.ts, value))
    return points


def _bucket_points(inside: Sequence[Snapshot]) -> dict[str, dict[str, dict[tuple[Labels, float], list[Point]]]]:
    points: dict[str, dict[str, dict[tuple[Labels, float], list[Point]]]] = {}
    for snap in inside:
        for metric, by_model in snap.buckets.items():
            metric_points = points.setdefault(metric, {})
            for model, series in by_model.items():
                model_points = metric_points.setdefault(model, {})
                for key, value in series.items():
                    model_points.setdefault(key, []).append((snap.ts, value))
    return points


def _sum_rates(series: Iterable[list[Point]], start: float, end: float) -> float | None:
    total: float | None = None
    for points in series:
        rate = extrapolated_rate(points, start, end)
        if rate is not None:
            total = rate if total is None else total + rate
    return total


def _sum_rates_by_le(series: dict[tuple[Labels, float], list[Point]], start: float, end: float) -> LeRates:
    by_le: LeRates = {}
    for (_, le), points in series.items():
        rate = extrapolated_rate(points, start, end)
        if rate is not None:
            by_le[le] = by_le.get(le, 0.0) + rate
    return by_le


def _attach_http(per_model: dict[str, Rates], inside: Sequence[Snapshot], start: float, end: float) -> None:
    # HTTP counters carry no model label: they are attributed only to a single-model target.
    if len(per_model) != 1:
        return
    (rates,) = per_model.values()
    for kind in ("all", "errors"):
        series: dict[Labels, list[Point]] = {}
        for snap in inside:
            for labels, value in snap.http.get(kind, {}).items():
                series.setdefault(labels, []).append((snap.ts, value))
        if kind == "all":
            rates.http_all = _sum_rates(series.values(), start, end)
        elif rates.http_all is not None:
            rates.http_errors = _sum_rates(series.values(), start, end) or 0.0


def _attach_baseline(per_model: dict[str, Rates], history: Sequence[Snapshot], end: float, seconds: float) -> None:
    start = end - seconds
    before = [s for s in history if start <= s.ts <= end]
    by_model = _counter_points(before).get("generation_tokens", {})
    for model, series in by_model.items():
        if model in per_model:
            per_model[model].baseline_generation = _sum_rates(series.values(), start, end)
