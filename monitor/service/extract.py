"""One scrape of one engine page -> a Snapshot of just the series we derive from.

Counters and histogram buckets stay per series (an `engine`/rank/`pid` child is its own
counter with its own resets), exactly as Prometheus stores them, because `rate()` is taken
per series before anything is summed. Gauges are combined per model right away.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from monitor.promtext import Labels, Page, go_float
from monitor.service.engines import HTTP_API_PREFIX, HTTP_LABELS, EngineSpec

ModelOf = Callable[[Labels], str]
BucketKey = tuple[Labels, float]
"""(the bucket series' labels, `le` as written included, and its upper bound as a number)

`le="0.2"` and `le="2e-1"` are two series, each rate()'d on its own, whose rates add up in one
bucket, as Prometheus' coalesceBuckets does; keying on the number alone would let one overwrite
the other."""


@dataclass(slots=True)
class Snapshot:
    ts: float
    # metric -> model -> series labels -> value
    counters: dict[str, dict[str, dict[Labels, float]]] = field(default_factory=dict)
    # metric -> model -> (labels without le, le) -> cumulative count
    buckets: dict[str, dict[str, dict[BucketKey, float]]] = field(default_factory=dict)
    # metric -> model -> value
    gauges: dict[str, dict[str, float]] = field(default_factory=dict)
    # "errors" (5xx) / "all" responses of the OpenAI API handlers -> series -> value
    http: dict[str, dict[Labels, float]] = field(default_factory=dict)
    non_finite: int = 0  # samples dropped because they were NaN or ±Inf

    def models(self) -> set[str]:
        found: set[str] = set()
        for counters in self.counters.values():
            found.update(counters)
        for buckets in self.buckets.values():
            found.update(buckets)
        for gauges in self.gauges.values():
            found.update(gauges)
        return found


def extract(page: Page, spec: EngineSpec, ts: float, default_model: str) -> Snapshot:
    snap = Snapshot(ts=ts)
    model_of = _model_reader(spec, default_model)
    dropped: set[tuple[str, Labels]] = set()  # a sample two selectors read is one dropped sample
    for metric, selectors in spec.counters.items():
        per_model: dict[str, dict[Labels, float]] = {}
        for selector in selectors:
            for labels, value in page.series(selector.sample).items():
                if not selector.accepts(labels):
                    continue
                if not math.isfinite(value):
                    dropped.add((selector.sample, labels))
                    continue
                key = ((selector.sample, ""), *labels)
                per_model.setdefault(model_of(labels), {})[key] = value
        if per_model:
            snap.counters[metric] = per_model
    snap.non_finite += len(dropped)
    for metric, candidates in spec.histograms.items():
        base = next((c for c in candidates if f"{c}_bucket" in page.samples), None)
        if base is not None:
            snap.buckets[metric] = _buckets(page.series(f"{base}_bucket"), model_of, snap)
    for metric, gauge in spec.gauges.items():
        name = next((c for c in gauge.candidates if c in page.samples), None)
        if name is not None:
            combined = _combine_gauge(page.series(name), gauge.combine, spec, model_of, snap)
            snap.gauges[metric] = {m: v * gauge.scale for m, v in combined.items()}
    _extract_http(page, snap)
    return snap


def _model_reader(spec: EngineSpec, default_model: str) -> ModelOf:
    label = spec.model_label

    def model_of(labels: Labels) -> str:
        if label is None:
            return default_model
        for name, value in labels:
            if name == label:
                return value
        return default_model

    return model_of


def _buckets(series: dict[Labels, float], model_of: ModelOf, snap: Snapshot) -> dict[str, dict[BucketKey, float]]:
    per_model: dict[str, dict[BucketKey, float]] = {}
    for labels, value in series.items():
        if not math.isfinite(value):
            snap.non_finite += 1
            continue
        identity = _split_le(labels)
        if identity is not None:
            per_model.setdefault(model_of(labels), {})[identity] = value
    return per_model


@lru_cache(maxsize=65536)
def _split_le(labels: Labels) -> BucketKey | None:
    # The same label tuples come back every scrape (the parser caches them): read `le` once.
    le_text = next((v for k, v in labels if k == "le"), None)
    if le_text is None:
        return None
    try:
        le = go_float(le_text)
    except ValueError:
        return None  # histogram_quantile skips a bucket whose `le` is not a number, so do we
    return labels, le


def _combine_gauge(
    series: dict[Labels, float], combine: str, spec: EngineSpec, model_of: ModelOf, snap: Snapshot
) -> dict[str, float]:
    # One engine's value seen by several API-server processes (`pid`) counts once: the max.
    groups: dict[tuple[str, Labels], float] = {}
    for labels, value in series.items():
        if not math.isfinite(value):
            snap.non_finite += 1
            continue
        key = (model_of(labels), tuple(p for p in labels if p[0] not in spec.process_labels))
        groups[key] = max(value, groups.get(key, -math.inf))
    combined: dict[str, float] = {}
    for (model, _), value in groups.items():
        if model in combined:
            previous = combined[model]
            combined[model] = previous + value if combine == "sum" else max(previous, value)
        else:
            combined[model] = value
    return combined


def _extract_http(page: Page, snap: Snapshot) -> None:
    for sample, (route, status) in HTTP_LABELS.items():
        for labels, value in page.series(sample).items():
            values = dict(labels)
            if not values.get(route, "").startswith(HTTP_API_PREFIX) or not math.isfinite(value):
                continue
            snap.http.setdefault("all", {})[labels] = value
            if values.get(status, "").startswith("5"):
                snap.http.setdefault("errors", {})[labels] = value
