"""Prices x inventory x the service layer's throughput -> the cost numbers. Pure: plain values in and out.

    spend rate        Σ price of the GPUs paid for                         ($/h)
    idle spend        Σ price x (1 - utilization), GPUs with a reading     ($/h)
    $/1M tokens       spend of a model's GPUs / its token throughput x 1e6/3600
    fleet $/1M        all spend / all tokens of every target (needs no target-to-GPU mapping)
                      (2.5 $/h at 5,200 tokens/s: 2.5 / 3600 / 5200 x 1e6 = 0.1335 $)
    expensive share   share of the window's requests longer than factor x the baseline's P99,
                      from the engines' prompt / generation-length histograms

A GPU shared by several targets splits its price evenly between them, and a target serving
several models splits its spend evenly between those; nothing is counted twice. A model whose
mapped GPUs are not all priced has no spend and no $/token: never a guess, never infinity; the
fleet's $/token likewise waits until every GPU has a price (a partial spend would read low).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from monitor.cost.inventory import InventoryGpu
from monitor.cost.prices import PriceBook, Quote
from monitor.service.derive import WindowStats
from monitor.service.promql import fraction_at_or_below, histogram_quantile
from monitor.service.view import ServiceView
from monitor.topology import TopologyMap

SECONDS_PER_HOUR = 3600.0
LENGTHS = {"prompt": "prompt_len", "generated": "generation_len"}  # our `tokens` label -> the histogram


def usd_per_million_tokens(usd_per_hour: float, tokens_per_second: float) -> float | None:
    """What a million tokens cost at this spend rate and throughput; None without throughput."""
    if not tokens_per_second > 0:
        return None
    return usd_per_hour / SECONDS_PER_HOUR / tokens_per_second * 1e6


@dataclass(frozen=True)
class GpuCost:
    gpu: InventoryGpu
    quote: Quote | None
    targets: tuple[str, ...]

    @property
    def usd_per_hour(self) -> float | None:
        return self.quote.usd_per_hour if self.quote is not None else None

    @property
    def idle_usd_per_hour(self) -> float | None:
        if self.quote is None or self.gpu.utilization is None:
            return None
        return self.quote.usd_per_hour * (1.0 - min(max(self.gpu.utilization, 0.0), 1.0))


@dataclass(frozen=True)
class Expensive:
    ratio: float
    threshold_tokens: float  # factor x the baseline's P99
    baseline_p99_tokens: float


@dataclass
class CostNumbers:
    gpus: list[GpuCost] = field(default_factory=list)
    usd_per_hour: float = 0.0  # every priced GPU
    idle_usd_per_hour: float | None = None
    idle_ratio: float | None = None  # idle spend / spend, over the GPUs with a utilization reading
    by_target: dict[str, float] = field(default_factory=dict)
    by_model: dict[str, float] = field(default_factory=dict)
    # (model, window) -> (generated, all) tokens/s of the model's mapped targets
    throughput: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    per_million: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (model, window, tokens)
    fleet_per_million: dict[tuple[str, str], float] = field(default_factory=dict)  # (window, tokens)
    baseline_ratio: dict[tuple[str, str], float] = field(default_factory=dict)  # (model, window), generated
    expensive: dict[tuple[str, str, str], Expensive] = field(default_factory=dict)  # (model, window, tokens)

    @property
    def unpriced(self) -> list[GpuCost]:
        return [g for g in self.gpus if g.quote is None]


def derive_costs(
    gpus: Sequence[InventoryGpu],
    prices: PriceBook,
    topology: TopologyMap,
    target_models: Mapping[str, frozenset[str]],
    service: ServiceView,
    expensive_factor: float,
) -> CostNumbers:
    out = CostNumbers(gpus=[GpuCost(g, prices.price(g.node, g.model), topology.targets_of(*g.key)) for g in gpus])
    out.usd_per_hour = sum(g.usd_per_hour or 0.0 for g in out.gpus)
    _idle(out)
    _by_target(out, topology)
    _by_model(out, topology, target_models)
    _per_million(out, topology, target_models, service)
    _fleet_per_million(out, service)
    for (model, window), stats in service.fleet.items():
        for tokens in LENGTHS:
            found = expensive_share(stats, tokens, expensive_factor)
            if found is not None:
                out.expensive[(model, window, tokens)] = found
    return out


def _idle(out: CostNumbers) -> None:
    read = [g for g in out.gpus if g.idle_usd_per_hour is not None]
    if not read:
        return
    out.idle_usd_per_hour = sum(g.idle_usd_per_hour or 0.0 for g in read)
    paid = sum(g.usd_per_hour or 0.0 for g in read)
    out.idle_ratio = out.idle_usd_per_hour / paid if paid > 0 else None


def _by_target(out: CostNumbers, topology: TopologyMap) -> None:
    price = {g.gpu.key: g.usd_per_hour for g in out.gpus}
    for target, keys in topology.by_target.items():
        prices = [price.get(key) for key in keys]
        if keys and all(p is not None for p in prices):
            shares = [(p or 0.0) / len(topology.targets_of(*k)) for p, k in zip(prices, keys, strict=True)]
            out.by_target[target] = sum(shares)


def _by_model(out: CostNumbers, topology: TopologyMap, target_models: Mapping[str, frozenset[str]]) -> None:
    unknown: set[str] = set()
    for target in topology.by_target:
        models = target_models.get(target, frozenset())
        spend = out.by_target.get(target)
        for model in models:
            if spend is None:
                unknown.add(model)
            else:
                out.by_model[model] = out.by_model.get(model, 0.0) + spend / len(models)
    for model in unknown:
        out.by_model.pop(model, None)


def _per_million(
    out: CostNumbers, topology: TopologyMap, target_models: Mapping[str, frozenset[str]], service: ServiceView
) -> None:
    for model, spend in out.by_model.items():
        serving = [t for t in topology.by_target if model in target_models.get(t, frozenset())]
        for window in service.windows:
            generated = prompt = 0.0
            for target in serving:  # a target that is down serves nothing, and its GPUs still cost
                view = service.targets.get(target)
                stats = view.stats.get((model, window.label)) if view is not None else None
                if stats is not None:
                    generated += stats.generation_tokens_per_second or 0.0
                    prompt += stats.prompt_tokens_per_second or 0.0
            out.throughput[(model, window.label)] = (generated, generated + prompt)
            for tokens, rate in (("generated", generated), ("all", generated + prompt)):
                value = usd_per_million_tokens(spend, rate)
                if value is not None:
                    out.per_million[(model, window.label, tokens)] = value


def _fleet_per_million(out: CostNumbers, service: ServiceView) -> None:
    if out.unpriced or not out.gpus:
        return
    for window in service.windows:
        stats = [s for view in service.targets.values() for (_, w), s in view.stats.items() if w == window.label]
        generated = sum(s.generation_tokens_per_second or 0.0 for s in stats)
        prompt = sum(s.prompt_tokens_per_second or 0.0 for s in stats)
        for tokens, rate in (("generated", generated), ("all", generated + prompt)):
            value = usd_per_million_tokens(out.usd_per_hour, rate)
            if value is not None:
                out.fleet_per_million[(window.label, tokens)] = value


def expensive_share(stats: WindowStats, tokens: str, factor: float) -> Expensive | None:
    """Share of the window's requests whose `tokens` length exceeds factor x the baseline's P99."""
    metric = LENGTHS[tokens]
    window, baseline = stats.lengths.get(metric), stats.baseline_lengths.get(metric)
    if not window or not baseline:
        return None
    p99 = histogram_quantile(0.99, list(baseline.items()))
    if math.isnan(p99):
        return None
    threshold = factor * p99
    within = fraction_at_or_below(threshold, sorted(window.items()))
    if math.isnan(within):
        return None  # no request finished in the window
    return Expensive(max(0.0, 1.0 - within), threshold, p99)


class SpendHistory:
    """(time, spend $/h, tokens/s) per (model, window), for the $/token baseline.

    The baseline $/1M tokens over [start - B, start] is the mean spend over the mean throughput
    of the samples in that range: the GPUs paid for then, the tokens they produced then. Like the
    service baselines it exists only once the samples reach back over `min_coverage` of B (one at
    or before start - c*B, looked for back to start - 2B: keep that much).
    """

    def __init__(self, keep_seconds: float) -> None:
        self.keep = keep_seconds
        self.samples: dict[tuple[str, str], deque[tuple[float, float, float]]] = {}

    def add(self, ts: float, numbers: CostNumbers,
            full_from: Mapping[str, float] | None = None) -> list[tuple[str, str, float, float, float]]:
        """Remember this tick; a window's rates count once it is `full_from[window]`: until the monitor
        has watched for a whole window, its rates cover only part of it and read low. Returns what was
        added, as (model, window, ts, spend, generated)."""
        added = []
        for (model, window), (generated, _) in numbers.throughput.items():
            spend = numbers.by_model.get(model)
            if spend is None or ts < (full_from or {}).get(window, ts):
                continue
            self.restore(model, window, ts, spend, generated)
            added.append((model, window, ts, spend, generated))
        return added

    def restore(self, model: str, window: str, ts: float, spend: float, generated: float) -> None:
        line = self.samples.setdefault((model, window), deque())
        line.append((ts, spend, generated))
        while line and line[0][0] < ts - self.keep:
            line.popleft()

    def baseline_usd_per_million(self, model: str, window: str, start: float, end: float,
                                 min_coverage: float = 0.0) -> float | None:
        line = self.samples.get((model, window), ())
        if self.coverage(model, window, start, end) < min_coverage:
            return None
        inside = [(s, t) for ts, s, t in line if start <= ts <= end]
        if not inside:
            return None
        spend = sum(s for s, _ in inside) / len(inside)
        return usd_per_million_tokens(spend, sum(t for _, t in inside) / len(inside))


    def coverage(self, model: str, window: str, start: float, end: float) -> float:
        """How far back (share of end - start) the samples reach, looking back to twice the range."""
        seconds = end - start
        first = next((ts for ts, _, _ in self.samples.get((model, window), ()) if ts > end - 2 * seconds), None)
        return 0.0 if first is None or seconds <= 0 else min(1.0, (end - first) / seconds)


def baseline_ratios(numbers: CostNumbers, history: SpendHistory, now: float, windows: Mapping[str, float],
                    baseline_seconds: float, min_coverage: float = 0.0) -> dict[tuple[str, str], float]:
    """$/1M generated tokens over each window / the same over the baseline before it."""
    ratios: dict[tuple[str, str], float] = {}
    for (model, window, tokens), value in numbers.per_million.items():
        if tokens != "generated":
            continue
        start = now - windows[window]
        base = history.baseline_usd_per_million(model, window, start - baseline_seconds, start, min_coverage)
        if base:
            ratios[(model, window)] = value / base
    return ratios


def split_by_day(start: float, end: float, zone: ZoneInfo) -> list[tuple[str, float]]:
    """[start, end] cut at local midnights: (YYYY-MM-DD, seconds) per local day it covers."""
    pieces: list[tuple[str, float]] = []
    at = start
    while at < end:
        local = datetime.fromtimestamp(at, zone)
        midnight = datetime.combine(local.date() + timedelta(days=1), datetime.min.time(), zone).timestamp()
        upto = min(end, midnight)
        pieces.append((local.date().isoformat(), upto - at))
        at = upto
    return pieces
