"""CostView -> metric families (fresh each scrape of /metrics; no I/O, no state kept)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from monitor.catalog import family
from monitor.cost.collector import FLEET, IDLE, CostView


def _gauge(name: str, value: float | None, labels: dict[str, str] | None = None) -> Metric:
    fam = family(name)
    if value is not None:
        fam.add_sample(name, labels or {}, value)
    return fam


def render_cost(view: CostView) -> Iterator[Metric]:
    if not view.present:
        return
    numbers = view.numbers
    known, price = family("inference_cost_price_known"), family("inference_cost_gpu_price_usd_per_hour")
    for cost in numbers.gpus:
        labels = {"node": cost.gpu.node, "gpu": cost.gpu.gpu}
        known.add_sample(known.name, labels, 0.0 if cost.quote is None else 1.0)
        if cost.usd_per_hour is not None:
            price.add_sample(price.name, {**labels, "model": cost.gpu.model}, cost.usd_per_hour)
    yield known
    yield price
    asleep = family("inference_gpu_serving_asleep")
    for (node, gpu), value in sorted(view.serving_asleep.items()):
        asleep.add_sample(asleep.name, {"node": node, "gpu": gpu}, value)
    yield asleep
    rate = _gauge("inference_cost_usd_per_hour", numbers.usd_per_hour)
    for target, usd in sorted(numbers.by_target.items()):
        rate.add_sample(rate.name, {"target": target}, usd)
    for model, usd in sorted(numbers.by_model.items()):
        rate.add_sample(rate.name, {"model": model}, usd)
    yield rate
    yield _gauge("inference_cost_idle_usd_per_hour", numbers.idle_usd_per_hour)
    yield _gauge("inference_cost_idle_ratio", numbers.idle_ratio)
    per_million = family("inference_cost_usd_per_million_tokens")
    for (model, window, tokens), usd in sorted(numbers.per_million.items()):
        per_million.add_sample(per_million.name, {"model": model, "window": window, "tokens": tokens}, usd)
    for (window, tokens), usd in sorted(numbers.fleet_per_million.items()):  # fleet-wide: no model label
        per_million.add_sample(per_million.name, {"window": window, "tokens": tokens}, usd)
    yield per_million
    baseline = family("inference_cost_per_token_baseline_ratio")
    for (model, window), ratio in sorted(numbers.baseline_ratio.items()):
        baseline.add_sample(baseline.name, {"model": model, "window": window}, ratio)
    yield baseline
    expensive = family("inference_cost_expensive_request_ratio")
    for (model, window, tokens), found in sorted(numbers.expensive.items()):
        expensive.add_sample(expensive.name, {"model": model, "window": window, "tokens": tokens}, found.ratio)
    yield expensive
    yield from _totals(view)


def _totals(view: CostView) -> Iterator[Metric]:
    total = family("inference_cost_usd_total")
    for scope, usd in sorted(view.totals.items()):
        if scope == FLEET:
            total.add_sample("inference_cost_usd_total", {}, usd)
        elif scope.startswith(("target:", "model:")):
            kind, name = scope.split(":", 1)
            total.add_sample("inference_cost_usd_total", {kind: name}, usd)
    yield total
    idle = family("inference_cost_idle_usd_total")
    if IDLE in view.totals:
        idle.add_sample("inference_cost_idle_usd_total", {}, view.totals[IDLE])
    yield idle
    yield _gauge("inference_cost_today_usd", view.today.get(FLEET, 0.0))
    yield _gauge("inference_cost_daily_budget_usd", view.budget_usd)
    yield _gauge("inference_cost_budget_used_ratio", view.budget_used_ratio)
