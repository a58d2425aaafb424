"""Windows of snapshots -> the service numbers we export, per target x model and fleet-wide.

Every number is the PromQL expression an operator would write, evaluated on the samples we
scraped:

    requests/s        sum by (model) (rate(requests[w]))
    TTFT P99          histogram_quantile(0.99, sum by (le, model) (rate(ttft_bucket[w])))
    error ratio       sum(rate(errors[w])) / sum(rate(requests[w]))
    baseline ratio    rate(generation_tokens[w]) / rate(generation_tokens[B] offset w)
                      -- only where the history reaches back over `min_coverage` of B (below)
    ratio baselines   prefix-cache hit and draft acceptance ratios over the same baseline window
                      (hits[B] offset w / queries[B] offset w), and the window's ratio over it

Fleet-wide numbers sum the per-target rates; quantiles sum bucket rates across targets on
the bucket bounds every target has (summing pages with different bounds would be wrong).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from operator import itemgetter
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from monitor.intern import Interned
from monitor.service.promql import (
    below_first_bound,
    bucket_fractions_at_or_below,
    first_bounds_holding_all,
    fraction_at_or_below,
    histogram_quantiles,
    ragged_bucket_quantiles,
)
from monitor.service.series import SeriesStore

QUANTILES = (0.5, 0.95, 0.99)
RATE_METRICS = ("requests", "errors", "prompt_tokens", "generation_tokens", "preemptions", "aborts")
# Ratios of two counters' rates: ours -> (numerator, denominator, added); no sample while the
# denominator's rate is 0 (nothing looked up, nothing generated).
RATIOS = {
    "prefix_cache_hit_ratio": ("prefix_cache_hits", "prefix_cache_queries", 0.0),
    "prompt_seconds_per_token": ("prompt_seconds", "prompt_tokens_computed", 0.0),
    "generation_seconds_per_token": ("generation_seconds", "generation_tokens", 0.0),
    "spec_decode_acceptance_ratio": ("spec_accepted_tokens", "spec_draft_tokens", 0.0),
    # Mean acceptance length: accepted draft tokens per verification step plus the target model's
    # own (bonus) token: tokens per target-model step.
    "spec_decode_acceptance_length": ("spec_accepted_tokens", "spec_drafts", 1.0),
    # A KV connector's cross-instance cache (vLLM: LMCache, NIXL P2P): prompt tokens found / looked up.
    "external_prefix_cache_hit_ratio": ("external_prefix_hits", "external_prefix_queries", 0.0),
    # SGLang's EPLB balancedness Summary: its sum over its count, the window's mean (1 = even).
    "moe_expert_balancedness_ratio": ("moe_balancedness_sum", "moe_balancedness_count", 0.0),
}
# The ratios that also get a trailing baseline (a drop against it is an alert): ours -> exported names
# of (the baseline's ratio, the window's ratio over the baseline's).
BASELINE_RATIOS = {
    "prefix_cache_hit_ratio": ("prefix_cache_hit_ratio_baseline", "prefix_cache_hit_baseline_ratio"),
    "spec_decode_acceptance_ratio": ("spec_decode_acceptance_ratio_baseline", "spec_decode_acceptance_baseline_ratio"),
}
# The counters a baseline point keeps: the throughput's and those ratios' numerators and denominators.
BASELINE_COUNTERS = ("generation_tokens", *dict.fromkeys(c for ours in BASELINE_RATIOS for c in RATIOS[ours][:2]))
PER_POSITION = "spec_accepted_pos/"  # accepted draft tokens per position: "spec_accepted_pos/<position>"
CACHED_BY_SOURCE = "prompt_cached_by_source/"  # prefix-cache hit tokens per tier: ".../<source>"
HISTOGRAMS = ("ttft", "tpot", "e2e", "queue", "prefill", "decode", "inference")
# KV-cache tiers: our counter "<kind>/<tier>" -> the per-tier number its rate is (engines.py's
# tier families); the latency histograms "kv_load/<tier>" and "kv_store/<tier>" get quantiles as
# every histogram does.
TIER_RATES = {
    "kv_load_bytes": "load_bytes_per_second",
    "kv_store_bytes": "store_bytes_per_second",
    "kv_load_tokens": "load_tokens_per_second",
    "kv_store_tokens": "store_tokens_per_second",
    "kv_loads": "loads_per_second",
    "kv_evictions": "evictions_per_second",
}
TIER_HISTOGRAMS = ("kv_load", "kv_store")
# Request-length histograms (prompt / generated tokens per request): no quantiles of their own;
# their window and baseline buckets go to the cost layer (expensive requests).
LENGTH_HISTOGRAMS = ("prompt_len", "generation_len")
# numpy's fixed cost per call is more than a walk over one histogram's ~20 buckets: a derivation
# with fewer histograms walks them (a page of a model or a few), and so does a set of bounds that
# fewer share (measured: numpy is ahead from ~10 model-windows, 20% at 20, 2026-12-02).
VECTOR_HISTOGRAMS = 100
VECTOR_ROWS = 12

LeRates = dict[float, float]
Key = TypeVar("Key", str, float)
Floats = npt.NDArray[np.float64]
RowKeys = tuple[tuple[str, ...], tuple[tuple[str, tuple[float, ...]], ...], tuple[str, ...],
                tuple[tuple[str, tuple[float, ...]], ...]]
"""A `Rates`' row layout: its counters, its histograms' bounds, its baseline counters and bounds."""
_intern: Interned[RowKeys] = Interned(4096)  # one object per layout: rows of one engine compare by identity


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
    baseline_generation: float | None = None  # only where the baseline window is covered
    covered_generation: float | None = None  # generation tokens/s of the targets that have a baseline
    baseline_coverage: float | None = None  # share of the baseline window the history reaches back over
    baseline_buckets: dict[str, LeRates] = field(default_factory=dict)  # request lengths over the baseline
    baseline_counters: dict[str, float] = field(default_factory=dict)  # BASELINE_COUNTERS over the baseline
    # Its numbers in one row, and what each column is (`_row`): kept while it lives, for the fleet sums.
    row: tuple[RowKeys, Floats] | None = field(default=None, compare=False, repr=False)


@dataclass
class WindowStats:
    requests_per_second: float | None = None
    error_ratio: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    preemptions_per_second: float | None = None
    aborted_requests_per_second: float | None = None
    throughput_baseline_ratio: float | None = None
    prefix_cache_hit_ratio: float | None = None  # prompt tokens found in the prefix cache / looked up
    prompt_seconds_per_token: float | None = None  # mean busy time per computed prompt token (llama.cpp)
    generation_seconds_per_token: float | None = None  # mean busy time per generated token (llama.cpp)
    spec_decode_acceptance_ratio: float | None = None  # accepted / proposed draft tokens
    spec_decode_acceptance_length: float | None = None  # 1 + accepted per draft: tokens per target step
    prefix_cache_hit_ratio_baseline: float | None = None  # the hit ratio over the trailing baseline window
    prefix_cache_hit_baseline_ratio: float | None = None  # the window's hit ratio / the baseline's
    spec_decode_acceptance_ratio_baseline: float | None = None
    spec_decode_acceptance_baseline_ratio: float | None = None
    # draft position ("0", "1", ...) -> accepted tokens at that position / drafts (vLLM)
    spec_decode_position_acceptance: dict[str, float] = field(default_factory=dict)
    # vLLM's estimated model work (MFU's numerator: FLOPs and bytes moved per GPU, summed over engines)
    estimated_flops_per_second: float | None = None
    estimated_read_bytes_per_second: float | None = None
    estimated_write_bytes_per_second: float | None = None
    admission_rejections_per_second: float | None = None  # refused by a queue limit (HTTP 503), vLLM
    # cache tier ("device", "host", "disk", "p2p", ...) -> prefix-cache hit tokens per second (vLLM)
    prompt_tokens_cached_by_source: dict[str, float] = field(default_factory=dict)
    external_prefix_cache_hit_ratio: float | None = None  # a KV connector's cache: found / looked up
    moe_expert_balancedness_ratio: float | None = None  # mean over max expert load per GPU (1 = even)
    # KV tier ("host", "1:fs", ...) -> TIER_RATES' numbers, "hit_ratio", "load_mean_seconds",
    # "reload_ratio" (loaded back per evicted, the thrashing sign)
    kv_tiers: dict[str, dict[str, float]] = field(default_factory=dict)
    pd_transfer_failures_per_second: float | None = None  # P/D KV transfers (and bootstraps) failed
    pd_transfer_bytes_per_second: float | None = None
    pd_transfer_ttft_share_ratio: float | None = None  # mean transfer time / mean TTFT over the window
    baseline_coverage: float | None = None  # share of the baseline window covered (None: no history)
    quantiles: dict[str, dict[float, float]] = field(default_factory=dict)
    slo_attainment: dict[str, float] = field(default_factory=dict)
    # histogram -> its first bucket's bound, where every observation of the window fell under it:
    # its quantiles are histogram_quantile()'s share of the bound, shown as "< bound"
    below_first_bound: dict[str, float] = field(default_factory=dict)
    lengths: dict[str, LeRates] = field(default_factory=dict)  # request-length bucket rates over the window
    baseline_lengths: dict[str, LeRates] = field(default_factory=dict)  # ... and over the baseline before it


def window_rates(
    store: SeriesStore,
    end: float,
    window: Window,
    baseline: SeriesStore | None = None,
    baseline_seconds: float = 0.0,
    counts_errors: bool = True,
    min_coverage: float = 0.0,
) -> dict[str, Rates]:
    """Per-model rates of one target over (end - window, end] (Prometheus 3.x: left-open).

    `baseline` holds the generation-token counters for longer, for the trailing throughput
    baseline over the `baseline_seconds` before the window. A baseline exists only when the
    model's samples reach back over `min_coverage` of it, i.e. one lies in (start - 2B, start - c*B]
    (the recording rules gate on the same range; `baseline` keeps its rows B back and the
    throughput counter's 2B, its `reach`): a rate over a window that holds a minute of an hour is
    no baseline, and dividing by it would inflate the ratio.
    """
    start = end - window.seconds
    per_model: dict[str, Rates] = {}
    http: dict[str, float] = {}
    for (kind, metric, model), by_le in store.family_rates(start, end):
        if kind == "http":
            http[metric] = by_le[None]
            continue
        rates = per_model.get(model)
        if rates is None:
            rates = per_model[model] = Rates()
        if kind == "bucket":
            rates.buckets[metric] = by_le  # type: ignore[assignment]  # a bucket's le is never None
        else:
            rates.counters[metric] = by_le[None]
    if counts_errors:
        # An engine that counts errors creates that child on the first error (TGI): none yet is 0.
        for rates in per_model.values():
            if "requests" in rates.counters:
                rates.counters.setdefault("errors", 0.0)
    # HTTP counters carry no model label: they are attributed only to a single-model target.
    if len(per_model) == 1 and "all" in http:
        (rates,) = per_model.values()
        rates.http_all, rates.http_errors = http["all"], http.get("errors", 0.0)
    if baseline is not None and baseline_seconds > 0:
        reach = baseline.earliest("counter", "generation_tokens", start - 2 * baseline_seconds, start)
        for model, first in reach.items():
            if model in per_model:
                per_model[model].baseline_coverage = min(1.0, (start - first) / baseline_seconds)
        for (kind, metric, model), by_le in baseline.family_rates(start - baseline_seconds, start):
            # One rule for every baseline drawn from here: the throughput's and the request lengths'
            # (the cost layer's expensive-request P99).
            model_rates = per_model.get(model)
            if model_rates is None or (model_rates.baseline_coverage or 0.0) < min_coverage:
                continue
            if kind == "bucket":
                model_rates.baseline_buckets[metric] = by_le  # type: ignore[assignment]
                continue
            rate = model_rates.baseline_counters[metric] = by_le[None]
            if metric == "generation_tokens":
                model_rates.baseline_generation = rate
                model_rates.covered_generation = model_rates.counters.get("generation_tokens")
    return per_model


def baseline_state(coverage: float | None, baseline_seconds: float, min_coverage: float) -> str:
    """"ready", or how far a baseline has come: "baseline warming up: 12 of 60 min"."""
    if coverage is not None and coverage >= min_coverage:
        return "ready"
    covered = (coverage or 0.0) * baseline_seconds
    if baseline_seconds >= 120:
        return f"baseline warming up: {int(covered // 60)} of {baseline_seconds / 60:g} min"
    return f"baseline warming up: {int(covered)} of {baseline_seconds:g} s"


def stats_from_rates(rates: Rates, objectives: Objectives) -> WindowStats:
    return stats_many([rates], objectives)[0]


def stats_many(rates_list: Sequence[Rates], objectives: Objectives) -> list[WindowStats]:
    """`stats_from_rates` of each, the quantiles and objective shares of all their histograms
    found together: one numpy pass per set of bucket bounds instead of a Python walk per histogram."""
    every = [_counter_stats(rates) for rates in rates_list]
    if sum(len(rates.buckets) for rates in rates_list) >= VECTOR_HISTOGRAMS:
        _histogram_stats(rates_list, every, objectives)
        return every
    for rates, stats in zip(rates_list, every, strict=True):  # a page of a model or a few: walked
        for metric, le_rates in rates.buckets.items():
            if metric in LENGTH_HISTOGRAMS:
                stats.lengths[metric] = le_rates
                continue
            buckets = list(le_rates.items())
            values = zip(QUANTILES, histogram_quantiles(QUANTILES, buckets), strict=True)
            finite = {q: v for q, v in values if not math.isnan(v)}
            if finite:
                stats.quantiles[metric] = finite
            if (bound := below_first_bound(buckets)) is not None:
                stats.below_first_bound[metric] = bound
        for metric, threshold in (("ttft", objectives.ttft_seconds), ("tpot", objectives.tpot_seconds)):
            if metric in rates.buckets:
                share = fraction_at_or_below(threshold, sorted(rates.buckets[metric].items()))
                if not math.isnan(share):
                    stats.slo_attainment[metric] = share
    return every


def _counter_stats(rates: Rates) -> WindowStats:
    counters = rates.counters
    stats = WindowStats(
        requests_per_second=counters.get("requests"),
        prompt_tokens_per_second=counters.get("prompt_tokens"),
        generation_tokens_per_second=counters.get("generation_tokens"),
        preemptions_per_second=counters.get("preemptions"),
        aborted_requests_per_second=counters.get("aborts"),
        estimated_flops_per_second=counters.get("estimated_flops"),
        estimated_read_bytes_per_second=counters.get("estimated_read_bytes"),
        estimated_write_bytes_per_second=counters.get("estimated_write_bytes"),
        admission_rejections_per_second=counters.get("admission_rejections"),
    )
    for metric, value in counters.items():
        if metric.startswith(CACHED_BY_SOURCE):
            stats.prompt_tokens_cached_by_source[metric[len(CACHED_BY_SOURCE):]] = value
    stats.kv_tiers = kv_tier_stats(counters)
    _pd_stats(stats, counters)
    stats.error_ratio = _error_ratio(rates)
    for ours, (numerator, denominator, added) in RATIOS.items():
        above, below = counters.get(numerator), counters.get(denominator)
        if above is not None and below:
            setattr(stats, ours, added + above / below)
    if rates.covered_generation is not None and rates.baseline_generation:
        stats.throughput_baseline_ratio = rates.covered_generation / rates.baseline_generation
    drafts = counters.get("spec_drafts")
    if drafts:
        for metric, value in counters.items():
            if metric.startswith(PER_POSITION):
                stats.spec_decode_position_acceptance[metric[len(PER_POSITION):]] = value / drafts
    for ours, (baseline_name, over_name) in BASELINE_RATIOS.items():
        numerator, denominator, added = RATIOS[ours]
        above, below = rates.baseline_counters.get(numerator), rates.baseline_counters.get(denominator)
        if above is None or not below:
            continue
        baseline = added + above / below
        setattr(stats, baseline_name, baseline)
        now = getattr(stats, ours)
        if now is not None and baseline > 0:
            setattr(stats, over_name, now / baseline)
    stats.baseline_coverage = rates.baseline_coverage
    stats.baseline_lengths = rates.baseline_buckets
    return stats


def kv_tier_stats(counters: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Per tier: the rates of TIER_RATES, and three ratios where their denominators moved:

        hit_ratio          chunk hits / lookups in the tier (vLLM multi-tier offloading)
        load_mean_seconds  load time / loads (vLLM's offloading counters have no latency histogram)
        reload_ratio       KV loaded back / KV evicted, in one unit (tokens, else bytes): near 1 the
                           tier loads back what the GPU just evicted to it (thrashing)
    """
    per_tier: dict[str, dict[str, float]] = {}
    raw: dict[str, dict[str, float]] = {}
    for metric, value in counters.items():
        kind, slash, tier = metric.partition("/")
        if not slash or not kind.startswith("kv_"):
            continue
        raw.setdefault(tier, {})[kind] = value
        if kind in TIER_RATES:
            per_tier.setdefault(tier, {})[TIER_RATES[kind]] = value
    for tier, values in raw.items():
        numbers = per_tier.setdefault(tier, {})
        for name, (above, below) in (("hit_ratio", ("kv_tier_hits", "kv_tier_queries")),
                                     ("load_mean_seconds", ("kv_load_time", "kv_loads"))):
            if above in values and values.get(below):
                numbers[name] = values[above] / values[below]
        for loaded, evicted in (("kv_load_tokens", "kv_evicted_tokens"), ("kv_load_bytes", "kv_store_bytes")):
            if loaded in values and values.get(evicted):
                numbers["reload_ratio"] = values[loaded] / values[evicted]
                break
    return {tier: numbers for tier, numbers in per_tier.items() if numbers}


def _pd_stats(stats: WindowStats, counters: Mapping[str, float]) -> None:
    """P/D transfer numbers; the share of TTFT is (transfer sum / count) / (TTFT sum / count)."""
    stats.pd_transfer_failures_per_second = counters.get("pd_transfer_failures")
    stats.pd_transfer_bytes_per_second = counters.get("pd_transfer_bytes")
    seconds = counters.get("pd_transfer_seconds_sum")
    if seconds is None and "pd_transfer_ms_sum" in counters:
        seconds = counters["pd_transfer_ms_sum"] / 1000.0
    transfers, ttft_sum, ttft_count = (counters.get(c) for c in ("pd_transfer_count", "ttft_sum", "ttft_count"))
    if seconds is not None and transfers and ttft_sum and ttft_count:
        stats.pd_transfer_ttft_share_ratio = (seconds / transfers) / (ttft_sum / ttft_count)


def _histogram_stats(rates_list: Sequence[Rates], every: list[WindowStats], objectives: Objectives) -> None:
    """Each window's quantiles (QUANTILES, NaN left out) and objective shares, in its buckets' order."""
    thresholds = {"ttft": objectives.ttft_seconds, "tpot": objectives.tpot_seconds}
    # Grouped by their bounds in the order the store gives them (the same tuple for every model and
    # window of one engine): the rows are the dicts' values, sorted by one permutation per group.
    by_bounds: dict[tuple[float, ...], list[tuple[int, str]]] = {}
    for at, rates in enumerate(rates_list):
        for metric, le_rates in rates.buckets.items():
            if metric not in LENGTH_HISTOGRAMS:
                by_bounds.setdefault(tuple(le_rates), []).append((at, metric))
    quantiles: dict[tuple[int, str], list[float]] = {}
    shares: dict[tuple[int, str], float] = {}
    first_bounds: dict[tuple[int, str], float | None] = {}
    vector: list[tuple[tuple[float, ...], Floats, list[tuple[int, str]]]] = []
    for unsorted, members in by_bounds.items():
        # Walked one by one, in the page's order: a set of bounds few histograms share (numpy would
        # cost more), or one with a bound of NaN (`le="NaN"`), which has no place in a sorted row.
        if len(members) < VECTOR_ROWS or any(math.isnan(le) for le in unsorted):
            for at, metric in members:
                buckets = list(rates_list[at].buckets[metric].items())
                quantiles[(at, metric)] = histogram_quantiles(QUANTILES, buckets)
                first_bounds[(at, metric)] = below_first_bound(buckets)
                if metric in thresholds:
                    shares[(at, metric)] = fraction_at_or_below(thresholds[metric], sorted(buckets))
            continue
        order = sorted(range(len(unsorted)), key=unsorted.__getitem__)
        bounds = tuple(unsorted[i] for i in order)
        counts = np.fromiter(chain.from_iterable(rates_list[at].buckets[metric].values() for at, metric in members),
                             dtype=np.float64, count=len(members) * len(bounds)).reshape(len(members), len(bounds))
        if order != list(range(len(order))):
            counts = counts[:, order]
        vector.append((bounds, counts, members))
        first_bounds.update(zip(members, first_bounds_holding_all(bounds, counts), strict=True))
        for metric, threshold in thresholds.items():
            rows = [row for row, (_, name) in enumerate(members) if name == metric]
            if rows:
                found = bucket_fractions_at_or_below(threshold, bounds, counts[rows]).tolist()
                for row, share in zip(rows, found, strict=True):
                    shares[members[row]] = share
    # Every set of bounds' quantiles in one numpy pass (a derivation's ~7 sets: one per histogram).
    grouped = ragged_bucket_quantiles(QUANTILES, [(bounds, counts) for bounds, counts, _ in vector])
    for (_, _, members), found in zip(vector, grouped, strict=True):
        for member, values in zip(members, found.tolist(), strict=True):
            quantiles[member] = values
    for at, (rates, stats) in enumerate(zip(rates_list, every, strict=True)):
        for metric in rates.buckets:
            if metric in LENGTH_HISTOGRAMS:
                stats.lengths[metric] = rates.buckets[metric]
                continue
            values = quantiles[(at, metric)]
            if math.isnan(sum(values)):  # rare: only the finite ones are kept
                finite = {q: v for q, v in zip(QUANTILES, values, strict=True) if not math.isnan(v)}
                if finite:
                    stats.quantiles[metric] = finite
            else:
                stats.quantiles[metric] = dict(zip(QUANTILES, values, strict=True))
            if (bound := first_bounds.get((at, metric))) is not None:
                stats.below_first_bound[metric] = bound
        for metric in thresholds:
            share = shares.get((at, metric), math.nan)
            if not math.isnan(share):
                stats.slo_attainment[metric] = share


def rank_imbalance(labelled: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """Per model: max over mean of the ranks' load (running + waiting), with two ranks or more
    and any load at all (an idle fleet is not imbalanced)."""
    out: dict[str, float] = {}
    running, waiting = labelled.get("rank_running", {}), labelled.get("rank_waiting", {})
    for model in sorted(set(running) | set(waiting)):
        ranks = set(running.get(model, {})) | set(waiting.get(model, {}))
        loads = [running.get(model, {}).get(r, 0.0) + waiting.get(model, {}).get(r, 0.0) for r in ranks]
        mean = sum(loads) / len(loads) if loads else 0.0
        if len(loads) >= 2 and mean > 0:
            out[model] = max(loads) / mean
    return out


def fleet_rates(per_target: Iterable[dict[str, Rates]]) -> dict[str, Rates]:
    """Sum per-target rates by model; buckets only on the bounds that every target has.

    Where every target serving a model has the same counters and bounds (one engine version
    across the fleet), each target's numbers are one row (`_row`, made once per `Rates`) and numpy
    adds the rows target after target: what the sums below give, bit for bit. The per-histogram
    sums, looking every bound up in every target's dicts, took a large fleet's publish tick long
    (docs/measurements.md, seventh stop).
    """
    members: dict[str, list[Rates]] = {}
    for target in per_target:
        for model, rates in target.items():
            members.setdefault(model, []).append(rates)
    fleet: dict[str, Rates] = {}
    for model, each in members.items():
        total = fleet[model] = Rates()
        for rates in each:  # each added where a target has it (`_add(x, None)` is x)
            if rates.http_errors is not None:
                total.http_errors = _add(total.http_errors, rates.http_errors)
            if rates.http_all is not None:
                total.http_all = _add(total.http_all, rates.http_all)
            if rates.baseline_generation is not None:
                total.baseline_generation = _add(total.baseline_generation, rates.baseline_generation)
            if rates.covered_generation is not None:
                total.covered_generation = _add(total.covered_generation, rates.covered_generation)
            # The fleet's baseline is as far along as its least covered target's.
            if rates.baseline_coverage is not None:
                total.baseline_coverage = min(rates.baseline_coverage, 1.0 if total.baseline_coverage is None
                                              else total.baseline_coverage)
        if not _sum_by_rows(total, each):
            _sum_by_name(total, each)
    return fleet


def _row(rates: Rates) -> tuple[RowKeys, Floats]:
    """The rates' numbers in one row (counters, each histogram's buckets, the baseline's), and its layout."""
    if rates.row is None:
        keys: RowKeys = (tuple(rates.counters), tuple((m, tuple(b)) for m, b in rates.buckets.items()),
                         tuple(rates.baseline_counters),
                         tuple((m, tuple(b)) for m, b in rates.baseline_buckets.items()))
        keys = _intern(keys)
        values = np.fromiter(chain(rates.counters.values(), *map(dict.values, rates.buckets.values()),
                                   rates.baseline_counters.values(),
                                   *map(dict.values, rates.baseline_buckets.values())), dtype=np.float64)
        rates.row = (keys, values)
    return rates.row


def compact(rates: Rates) -> Rates:
    """The same rates with their counters and buckets in their row alone: what a parse worker
    sends (a 10-model target's rates were ~5,000 dict entries to read back and keep a scrape).
    `expand` gives the dicts back; the fleet sums read the row."""
    return replace(rates, counters={}, buckets={}, baseline_counters={}, baseline_buckets={}, row=_row(rates))


def expand(rates: Rates) -> Rates:
    """The dicts of compacted rates (`compact`) made again from their row; other rates as they are."""
    if rates.row is None or rates.counters or rates.buckets or rates.baseline_counters or rates.baseline_buckets:
        return rates
    out = replace(rates, counters={}, buckets={}, baseline_counters={}, baseline_buckets={})
    _fill(out, rates.row[0], rates.row[1].tolist())
    return out


def intern_row(rates: Rates, known: dict[int, RowKeys]) -> None:
    """Rates read back from a worker: their layout made the one object its equals share here, so
    rows compare by identity (`known`: the layouts interned for this batch, by id)."""
    if rates.row is None:
        return
    keys, values = rates.row
    canonical = known.get(id(keys))
    if canonical is None:
        canonical = known[id(keys)] = _intern(keys)
    rates.row = (canonical, values)


def _fill(total: Rates, keys: RowKeys, summed: list[float]) -> None:
    counters, buckets, baseline_counters, baseline_buckets = keys
    at = len(counters)
    total.counters = dict(zip(counters, summed[:at], strict=True))
    for metric, les in buckets:
        total.buckets[metric] = dict(zip(les, summed[at : at + len(les)], strict=True))
        at += len(les)
    total.baseline_counters = dict(zip(baseline_counters, summed[at : at + len(baseline_counters)], strict=True))
    at += len(baseline_counters)
    for metric, les in baseline_buckets:
        total.baseline_buckets[metric] = dict(zip(les, summed[at : at + len(les)], strict=True))
        at += len(les)


def _sum_by_rows(total: Rates, each: list[Rates]) -> bool:
    """`total`'s counters and buckets from the rows of `each`, when all have one layout (False: not)."""
    if len(each) < 2:
        return False
    rows = [_row(rates) for rates in each]
    keys = rows[0][0]
    if any(other is not keys for other, _ in rows) or not rows[0][1].size:
        return False
    # Row after row, in place: the loop's order, so its floats bit for bit (`add.accumulate` over the
    # stacked rows gave the same, but copied every row and wrote every partial sum: a good part of
    # a large fleet's publish tick, in long calls that held the GIL; docs/measurements.md, eighth stop).
    acc = rows[0][1].copy()
    for _, values in rows[1:]:
        np.add(acc, values, out=acc)
    summed = (0.0 + acc).tolist()
    _fill(total, keys, summed)
    return True


def _sum_by_name(total: Rates, each: list[Rates]) -> None:
    """`total`'s counters and buckets summed name by name: counters over the targets that have them,
    buckets on the bounds all of them have."""
    each = [expand(rates) for rates in each]  # a parse worker's rates hold their numbers in the row
    total.counters = _sum_all([rates.counters for rates in each])
    total.baseline_counters = _sum_all([rates.baseline_counters for rates in each])
    buckets: dict[str, list[LeRates]] = {}
    baseline_buckets: dict[str, list[LeRates]] = {}
    for rates in each:
        for metric, le_rates in rates.buckets.items():
            buckets.setdefault(metric, []).append(le_rates)
        for metric, le_rates in rates.baseline_buckets.items():
            baseline_buckets.setdefault(metric, []).append(le_rates)
    for metric, every in buckets.items():
        total.buckets[metric] = _sum_shared(every)
    for metric, every in baseline_buckets.items():
        total.baseline_buckets[metric] = _sum_shared(every)


def _sum_all(each: list[dict[str, float]]) -> dict[str, float]:
    """Counter rates summed over the targets, each counter over the targets that have it."""
    first = tuple(each[0])
    if len(each) > 1 and first and all(len(rates) == len(first) for rates in each):
        summed = _sum_rows(each, first)  # every target has the first one's counters, and no other
        if summed is not None:
            return summed
    total: dict[str, float] = {}
    for rates in each:
        for metric, value in rates.items():
            total[metric] = total.get(metric, 0.0) + value
    return total


def _sum_rows(each: Sequence[Mapping[Key, float]], keys: tuple[Key, ...]) -> dict[Key, float] | None:
    """`keys` summed over `each`, in its order, as a loop would add them (None: one lacks a key).

    `add.accumulate` sums in row order, so the floats are the loop's, bit for bit; a plain `sum`
    over the rows may pair them up instead.
    """
    row_of = itemgetter(*keys) if len(keys) > 1 else lambda rates: (rates[keys[0]],)
    try:
        rows = np.fromiter(chain.from_iterable(map(row_of, each)), dtype=np.float64, count=len(each) * len(keys))
    except KeyError:
        return None
    summed = 0.0 + np.add.accumulate(rows.reshape(len(each), len(keys)), axis=0)[-1]
    return dict(zip(keys, summed.tolist(), strict=True))


def _sum_shared(each: list[LeRates]) -> LeRates:
    """The targets' bucket rates summed on the bounds they all have, target after target.

    Where every target has the first one's bounds (one engine version across the fleet), numpy adds
    the rows: in Python, every bound of every histogram, window, model and target was an addition
    of its own, each assemble.
    """
    first = tuple(each[0])
    if len(each) > 1 and first:
        fast = _sum_rows(each, first)  # None: a target lacks one of the first one's bounds
        if fast is not None:
            return fast
    shared = set(first).intersection(*each[1:])
    summed: LeRates = {}
    for le_rates in each:
        for le, value in le_rates.items():
            summed[le] = summed.get(le, 0.0) + value
    return {le: value for le, value in summed.items() if le in shared}


def _error_ratio(rates: Rates) -> float | None:
    # The engine's count (finished with an error) and the HTTP layer's (5xx) see overlapping
    # failures; the ratio is the worse of the two, never their sum.
    ratios = []
    requests = rates.counters.get("requests")
    errors = rates.counters.get("errors")  # absent when the engine does not count errors
    if requests and errors is not None:
        ratios.append(errors / requests)
    if rates.http_all:
        ratios.append((rates.http_errors or 0.0) / rates.http_all)
    return max(ratios) if ratios else None


def _add(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else a + b
