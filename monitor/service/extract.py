"""One scrape of one engine page -> a Snapshot of just the series we derive from.

Counters and histogram buckets stay per series (an `engine`/rank/`pid` child is its own
counter with its own resets), exactly as Prometheus stores them, because `rate()` is taken
per series before anything is summed. Gauges are combined per model right away.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter

from monitor.promtext import Columns, Labels, Page, Series, go_float
from monitor.service.engines import HTTP_API_PREFIX, HTTP_LABELS, EngineSpec, GaugeSpec, Selector

ModelOf = Callable[[Labels], str]
BucketKey = tuple[Labels, float]
"""(the bucket series' labels, `le` as written included, and its upper bound as a number)

`le="0.2"` and `le="2e-1"` are two series, each rate()'d on its own, whose rates add up in one
bucket, as Prometheus' coalesceBuckets does; keying on the number alone would let one overwrite
the other."""


@dataclass(frozen=True, slots=True)
class LoraState:
    """The adapters of the newest vllm:lora_requests_info series (its value: when it was set)."""

    running: tuple[str, ...]
    waiting: tuple[str, ...]
    max_lora: int | None


@dataclass(slots=True)
class Snapshot:
    ts: float
    # metric -> model -> series labels -> value
    counters: dict[str, dict[str, dict[Labels, float]]] = field(default_factory=dict)
    # metric -> model -> (the bucket's labels, le) -> cumulative count (`Columns`, or a dict)
    buckets: dict[str, Mapping[str, Mapping[BucketKey, float]]] = field(default_factory=dict)
    # metric -> model -> value
    gauges: dict[str, dict[str, float]] = field(default_factory=dict)
    # metric -> model -> the kept label's value (rank, reason, state) -> value
    labelled: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    # "errors" (5xx) / "all" responses of the OpenAI API handlers -> series -> value
    http: dict[str, dict[Labels, float]] = field(default_factory=dict)
    lora: LoraState | None = None
    non_finite: int = 0  # samples dropped because they were NaN or ±Inf
    split_dropped: int = 0  # samples of a split counter past its first SPLIT_VALUES label values

    def models(self) -> set[str]:
        found: set[str] = set()
        for counters in self.counters.values():
            found.update(counters)
        for buckets in self.buckets.values():
            found.update(buckets)
        for gauges in self.gauges.values():
            found.update(gauges)
        return found


@dataclass(slots=True)
class _BucketPlan:
    """How one bucket family's series split by model: which index of the family goes where."""

    keys: tuple[Labels, ...]  # the family's label sets, in page order
    models: list[tuple[str, list[BucketKey], Callable[[list[float]], Sequence[float]]]]


class ExtractMemo:
    """What the last extract of one target learned of its bucket families (the biggest part of a
    page): a family whose label sets are the ones it had (the same objects, scrape after scrape)
    splits by model as it did, and only its values are read."""

    def __init__(self) -> None:
        self.owner: tuple[int, str] | None = None
        self.buckets: dict[str, _BucketPlan] = {}

    def own(self, spec: EngineSpec, default_model: str) -> None:
        if self.owner != (id(spec), default_model):  # another engine table or model: other plans
            self.owner, self.buckets = (id(spec), default_model), {}


SPLIT_VALUES = 64  # label values a split counter keeps (draft positions: vLLM proposes a handful)


def extract(page: Page, spec: EngineSpec, ts: float, default_model: str, memo: ExtractMemo | None = None) -> Snapshot:
    snap = Snapshot(ts=ts)
    model_of = _model_reader(spec, default_model)
    if memo is not None:
        memo.own(spec, default_model)
    dropped: set[tuple[str, Labels]] = set()  # a sample two selectors read is one dropped sample
    for metric, selectors in spec.counters.items():
        if metric in spec.only_with and spec.only_with[metric] not in snap.counters:
            continue
        per_model: dict[str, dict[Labels, float]] = {}
        for selector in selectors:
            for labels, key, value in _counter_series(page, selector, dropped):
                per_model.setdefault(model_of(labels), {})[key] = value
            if per_model and metric in spec.first_of:
                break
        if per_model:
            snap.counters[metric] = per_model
    for metric, (selector, label) in spec.counters_by.items():
        parts: set[str] = set()
        for labels, key, value in _counter_series(page, selector, dropped):
            part = dict(labels).get(label, "")
            if part not in parts:
                if len(parts) >= SPLIT_VALUES:  # 10,000 draft positions were sent: 20,000 series exported
                    snap.split_dropped += 1
                    continue
                parts.add(part)
            split = f"{metric}/{part}"
            snap.counters.setdefault(split, {}).setdefault(model_of(labels), {})[key] = value
    snap.non_finite += len(dropped)
    for metric, candidates in spec.histograms.items():
        base = next((c for c in candidates if f"{c}_bucket" in page.samples), None)
        if base is not None:
            family = f"{base}_bucket"
            snap.buckets[metric] = _buckets(page.series(family), model_of, snap,
                                            None if memo is None else (memo.buckets, family),
                                            spec.histogram_scale.get(metric, 1.0))
    dropped.clear()  # a gauge sample two tables read (a total and its per-rank split): one dropped
    for metric, gauge in spec.gauges.items():
        name = next((c for c in gauge.candidates if c in page.samples), None)
        if name is None:
            continue
        finite = _finite(name, page.series(name), dropped)
        if gauge.by is None:
            combined = _combine_gauge(finite, gauge.combine, spec, model_of)
            snap.gauges[metric] = {m: v * gauge.scale for m, v in combined.items()}
        else:
            kept = _combine_by(finite, gauge, spec, model_of)
            if kept:
                snap.labelled[metric] = kept
    snap.non_finite += len(dropped)
    if spec.lora_info is not None:
        snap.lora = _lora(page.series(spec.lora_info))
    _extract_http(page, snap)
    return snap


def _counter_series(page: Page, selector: Selector, dropped: set[tuple[str, Labels]]) -> Iterator[
        tuple[Labels, Labels, float]]:
    """(labels, series key, value) of the selector's finite samples it accepts; non-finite ones go to `dropped`."""
    for labels, value in page.series(selector.sample).items():
        if not selector.accepts(labels):
            continue
        if not math.isfinite(value):
            dropped.add((selector.sample, labels))
            continue
        yield labels, ((selector.sample, ""), *labels), value


def _lora(series: Series) -> LoraState | None:
    newest = max(((v, labels) for labels, v in series.items() if math.isfinite(v)), default=None)
    if newest is None:
        return None
    values = dict(newest[1])

    def names(label: str) -> tuple[str, ...]:
        return tuple(sorted(n for n in values.get(label, "").split(",") if n))

    limit = values.get("max_lora", "")
    return LoraState(names("running_lora_adapters"), names("waiting_lora_adapters"),
                     int(limit) if limit.isdigit() else None)


def _finite(name: str, series: Series, dropped: set[tuple[str, Labels]]) -> dict[Labels, float]:
    finite = {}
    for labels, value in series.items():
        if math.isfinite(value):
            finite[labels] = value
        else:
            dropped.add((name, labels))
    return finite


def _combine_by(series: dict[Labels, float], gauge: GaugeSpec, spec: EngineSpec,
                model_of: ModelOf) -> dict[str, dict[str, float]]:
    """Per model and value of `gauge.by`: the other labels combined as `_combine_gauge` does."""
    assert gauge.by is not None
    grouped: dict[str, dict[Labels, float]] = {}
    for labels, value in series.items():
        kept = next((v for k, v in labels if k == gauge.by), None)
        if kept is not None:
            grouped.setdefault(kept, {})[labels] = value
    out: dict[str, dict[str, float]] = {}
    for kept, members in grouped.items():
        for model, value in _combine_gauge(members, gauge.combine, spec, model_of).items():
            out.setdefault(model, {})[kept] = value * gauge.scale
    return out


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


def _buckets(series: Series, model_of: ModelOf, snap: Snapshot,
             memo: tuple[dict[str, _BucketPlan], str] | None = None,
             scale: float = 1.0) -> Mapping[str, Mapping[BucketKey, float]]:
    if memo is not None:
        plans, name = memo
        keys = tuple(series)
        plan = plans.get(name)
        if plan is None or plan.keys != keys:
            plan = plans[name] = _bucket_plan(keys, model_of, scale)
        values = list(series.values())
        if all(map(math.isfinite, values)):  # else the plain way below, which counts what it drops
            return {model: Columns(identities, pick(values)) for model, identities, pick in plan.models}
    per_model: dict[str, dict[BucketKey, float]] = {}
    for labels, value in series.items():
        if not math.isfinite(value):
            snap.non_finite += 1
            continue
        identity = _split_le(labels, scale)
        if identity is not None:
            per_model.setdefault(model_of(labels), {})[identity] = value
    return per_model


def _bucket_plan(keys: tuple[Labels, ...], model_of: ModelOf, scale: float = 1.0) -> _BucketPlan:
    indices: dict[str, tuple[list[BucketKey], list[int]]] = {}
    for index, labels in enumerate(keys):
        identity = _split_le(labels, scale)
        if identity is not None:
            identities, positions = indices.setdefault(model_of(labels), ([], []))
            identities.append(identity)
            positions.append(index)
    return _BucketPlan(keys, [(model, identities, _picker(positions))
                              for model, (identities, positions) in indices.items()])


def _picker(positions: list[int]) -> Callable[[list[float]], Sequence[float]]:
    """The values at `positions`, in one C call (itemgetter of one index returns the value alone)."""
    if len(positions) == 1:
        (only,) = positions
        return lambda values: (values[only],)
    return itemgetter(*positions)


@lru_cache(maxsize=65536)
def _split_le(labels: Labels, scale: float = 1.0) -> BucketKey | None:
    # The same label tuples come back every scrape (the parser caches them): read `le` once.
    le_text = next((v for k, v in labels if k == "le"), None)
    if le_text is None:
        return None
    try:
        le = go_float(le_text)
    except ValueError:
        return None  # histogram_quantile skips a bucket whose `le` is not a number, so do we
    return labels, le * scale  # a bound in ms made seconds (`EngineSpec.histogram_scale`); +Inf stays


@lru_cache(maxsize=65536)
def _without(labels: Labels, process_labels: tuple[str, ...]) -> Labels:
    """The labels but the per-process ones (`pid`): the same tuples every scrape, so kept."""
    return tuple(pair for pair in labels if pair[0] not in process_labels) if process_labels else labels


def _combine_gauge(series: dict[Labels, float], combine: str, spec: EngineSpec, model_of: ModelOf) -> dict[str, float]:
    # One engine's value seen by several API-server processes (`pid`) counts once: the max.
    groups: dict[tuple[str, Labels], float] = {}
    for labels, value in series.items():
        key = (model_of(labels), _without(labels, spec.process_labels))
        groups[key] = max(value, groups.get(key, -math.inf))
    combined: dict[str, float] = {}
    counted: dict[str, int] = {}
    for (model, _), value in groups.items():
        counted[model] = counted.get(model, 0) + 1
        if model in combined:
            previous = combined[model]
            combined[model] = max(previous, value) if combine == "max" else previous + value
        else:
            combined[model] = value
    if combine == "mean":
        return {model: value / counted[model] for model, value in combined.items()}
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
