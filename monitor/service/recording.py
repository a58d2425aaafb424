"""Prometheus recording rules that compute the service series inside Prometheus, from the engine tables.

At fleet scale Prometheus (or Thanos Ruler, Mimir, vmalert) scrapes the engines itself; these rules
give it the same `inference_*` series the monitor exports -- same names, same `target`, `model` and
`window` labels, per target and fleet-wide -- so the alert rules and dashboards work on either.
They are generated, never written by hand: every engine and generation in `ENGINES` is covered.

How the tables become PromQL:
- a name is selected in both spellings (`{__name__=~"vllm:x|vllm_x"}`, see engines.spellings);
- alternatives (another engine, a renamed generation) are chained so that, per target and model,
  the first one present wins, as the monitor's "first candidate on the page" does:
  `A or (B unless on (target, model) A) or (C unless on (target, model) (A or B))`;
- `model` comes from the engine's model label, else a `model` label set by relabeling, else
  "unknown"; `target` is the label the scrape configuration sets (deploy/prometheus/prometheus.yml);
- rates are `rate()` over the window; quantiles `histogram_quantile()` of per-target bucket rates
  (`inference:<histogram>_bucket:rate`, recorded first), fleet-wide of their sum by (le, model).

Each rule is kept as a template whose references to other recorded series are placeholders, so a
test can expand them inline and query the whole expression against a Prometheus holding raw data.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from monitor.config import Duration
from monitor.service.derive import BASELINE_RATIOS, QUANTILES, RATIOS, TIER_HISTOGRAMS, TIER_RATES
from monitor.service.engines import ENGINES, HTTP_API_PREFIX, HTTP_LABELS, GaugeSpec, Selector, spellings

BY_TARGET = "target, model"
_REF = re.compile(r"\[\[([a-zA-Z_:][a-zA-Z0-9_:]*)\]\]")
_SUMMARIES = {"ttft": "inference_ttft_seconds", "tpot": "inference_tpot_seconds",
              "e2e": "inference_e2e_latency_seconds", "queue": "inference_queue_time_seconds",
              "prefill": "inference_prefill_time_seconds", "decode": "inference_decode_time_seconds",
              "inference": "inference_request_inference_time_seconds",
              "request_preemptions": "inference_request_preemptions"}
_RATES = {"requests": "inference_requests_per_second", "prompt_tokens": "inference_prompt_tokens_per_second",
          "generation_tokens": "inference_generation_tokens_per_second",
          "preemptions": "inference_preemptions_per_second", "aborts": "inference_aborted_requests_per_second",
          "estimated_flops": "inference_estimated_flops_per_second",
          "estimated_read_bytes": "inference_estimated_memory_read_bytes_per_second",
          "estimated_write_bytes": "inference_estimated_memory_write_bytes_per_second",
          "admission_rejections": "inference_admission_rejections_per_second"}
_GAUGES = {"running": "inference_requests_running", "waiting": "inference_requests_waiting",
           "kv_cache": "inference_kv_cache_usage_ratio",
           "spec_accept_length": "inference_spec_decode_engine_acceptance_length",
           "spec_accept_rate": "inference_spec_decode_engine_acceptance_ratio"}
# Gauges kept per one more label (the engine's own label renamed): engine-table gauge -> (ours, label)
_LABELLED_GAUGES = {"rank_running": ("inference_rank_requests_running", "rank"),
                    "rank_waiting": ("inference_rank_requests_waiting", "rank"),
                    "rank_kv_cache": ("inference_rank_kv_cache_usage_ratio", "rank"),
                    "waiting_by_reason": ("inference_requests_waiting_by_reason", "reason"),
                    "sleep_state": ("inference_engine_sleep_state", "state")}
_PROMQL_COMBINE = {"sum": "sum", "max": "max", "mean": "avg"}


@dataclass(frozen=True)
class Rule:
    """One recording rule. `expr` may hold `[[name]]`, a reference to a per-target series recorded
    earlier in the group: a selector in the file, the referenced expression inline in tests."""

    record: str
    expr: str
    labels: dict[str, str] = field(default_factory=dict)
    fleet: bool = False


def _name_regex(name: str) -> str:
    return "|".join(re.escape(s) for s in spellings(name))


def _selector(sample: str, match: Sequence[tuple[str, str]] = (), exclude: Sequence[tuple[str, str]] = ()) -> str:
    matchers = [f'__name__=~"{_name_regex(sample)}"']
    matchers += [f'{key}="{value}"' for key, value in match]
    excluded: dict[str, list[str]] = {}
    for key, value in exclude:
        excluded.setdefault(key, []).append(re.escape(value))
    matchers += [f'{key}!~"{"|".join(values)}"' for key, values in excluded.items()]
    return "{" + ", ".join(matchers) + "}"


def _with_model(expr: str, model_label: str | None) -> str:
    """`model` from the engine's label; a relabeled `model` otherwise; "unknown" when neither."""
    if model_label:
        expr = f'label_replace({expr}, "model", "$1", "{model_label}", "(.+)")'
    return f'label_replace({expr}, "model", "unknown", "model", "")'


def _first_present(alternatives: Iterable[tuple[str, str]], on: str = BY_TARGET) -> str:
    """Per (target, model), the first alternative that has any series.

    `alternatives` are (engine, expression). Names of different engines never meet on one page, so
    engines are joined by a plain `or`; the alternatives of one engine (renamed generations) are
    chained so that a later one counts only where no earlier one has series.
    """
    by_engine: dict[str, list[str]] = {}
    for engine, expr in alternatives:
        if expr not in by_engine.setdefault(engine, []):
            by_engine[engine].append(expr)
    chains = []
    for exprs in by_engine.values():
        chain = f"({exprs[0]})"
        for index, expr in enumerate(exprs[1:], start=1):
            earlier = " or ".join(f"({e})" for e in exprs[:index])
            chain += f"\nor\n(({expr}) unless on ({on}) ({earlier}))"
        chains.append(chain)
    return "\nor\n".join(chains)


def _counter(metric: str, window: str, offset: str = "", func: str = "rate") -> str | None:
    alternatives = []
    for spec in ENGINES:
        selectors: tuple[Selector, ...] = spec.counters.get(metric, ())
        if not selectors:
            continue
        rates = " or ".join(f"{func}({_selector(s.sample, s.match, s.exclude)}[{window}]{offset})" for s in selectors)
        alternatives.append((spec.engine, f"sum by ({BY_TARGET}) ({_with_model(rates, spec.model_label)})"))
    return _first_present(alternatives) if alternatives else None


def _buckets(histogram: str, window: str) -> str:
    alternatives = []
    for spec in ENGINES:
        for base in spec.histograms.get(histogram, ()):
            rate = f"rate({_selector(f'{base}_bucket')}[{window}])"
            alternatives.append((spec.engine, f"sum by ({BY_TARGET}, le) ({_with_model(rate, spec.model_label)})"))
    return _first_present(alternatives)


def _gauge(metric: str, keep: str | None = None, exclude: Sequence[str] = ()) -> str:
    """`keep`: the gauge's own `by` label, renamed to ours (rank, reason, state); `exclude`: values
    of that label left out (the "awake" engines when counting the sleeping ones)."""
    alternatives = []
    by = f"{BY_TARGET}, {keep}" if keep else BY_TARGET
    for spec in ENGINES:
        gauge: GaugeSpec | None = spec.gauges.get(metric)
        if gauge is None:
            continue
        for name in gauge.candidates:
            # One engine's value seen by several API-server processes counts once (max over pid).
            values = _selector(name, exclude=[(gauge.by, v) for v in exclude] if gauge.by else ())
            if spec.process_labels:
                values = f"max without ({', '.join(spec.process_labels)}) ({values})"
            if keep and gauge.by and gauge.by != keep:
                values = f'label_replace({values}, "{keep}", "$1", "{gauge.by}", "(.*)")'
            scaled = values if gauge.scale == 1.0 else f"({values}) * {gauge.scale!r}"
            combined = f"{_PROMQL_COMBINE[gauge.combine]} by ({by}) ({_with_model(scaled, spec.model_label)})"
            alternatives.append((spec.engine, combined))
    return _first_present(alternatives, on=by)


def _error_counting_targets() -> str:
    """Targets whose engine counts errors: no error series there yet means 0, not absent."""
    markers = [m for spec in ENGINES if "errors" in spec.counters for m in spec.markers]
    names = "|".join(_name_regex(m) for m in markers)
    return f'count by (target) ({{__name__=~"{names}"}})'


def _tier_counter(kind: str, window: str) -> str | None:
    """Rates of one per-tier counter family ("kv_load_bytes"), by (target, model, tier): a table entry
    "kind/<tier>" fixes the tier, a `counters_by` entry takes it from the engine's label."""
    alternatives = []
    for spec in ENGINES:
        for key, selectors in spec.counters.items():
            family, _, tier = key.partition("/")
            if family == kind and tier:
                rates = [f"rate({_selector(s.sample, s.match, s.exclude)}[{window}])" for s in selectors]
                if key in spec.first_of:  # spellings of one family: the first present per target and model
                    summed = " or ".join(f"sum by ({BY_TARGET}) ({_with_model(r, spec.model_label)})" for r in rates)
                else:
                    summed = f"sum by ({BY_TARGET}) ({_with_model(' or '.join(rates), spec.model_label)})"
                alternatives.append(f'label_replace({summed}, "tier", "{tier}", "", "")')
        if kind in spec.counters_by:
            selector, label = spec.counters_by[kind]
            rate = f"rate({_selector(selector.sample, selector.match, selector.exclude)}[{window}])"
            if label != "tier":
                rate = f'label_replace({rate}, "tier", "$1", "{label}", "(.*)")'
            alternatives.append(f"sum by ({BY_TARGET}, tier) ({_with_model(rate, spec.model_label)})")
    return "\nor\n".join(f"({a})" for a in alternatives) if alternatives else None


def _tier_kinds() -> list[str]:
    kinds = [key.partition("/")[0] for spec in ENGINES for key in spec.counters if "/" in key and key.startswith("kv_")]
    kinds += [kind for spec in ENGINES for kind in spec.counters_by if kind.startswith("kv_")]
    return list(dict.fromkeys(kinds))


def _tier_name(kind: str) -> str:
    """The exported series of a per-tier rate, or the recorded intermediate one."""
    return f"inference_kv_tier_{TIER_RATES[kind]}" if kind in TIER_RATES else f"inference:{kind}:rate"


def _tier_buckets(histogram: str, window: str) -> str:
    alternatives = []
    for spec in ENGINES:
        for key, bases in spec.histograms.items():
            family, _, tier = key.partition("/")
            for base in bases if family == histogram and tier else ():
                rate = f"rate({_selector(f'{base}_bucket')}[{window}])"
                summed = f"sum by ({BY_TARGET}, le) ({_with_model(rate, spec.model_label)})"
                alternatives.append((spec.engine, f'label_replace({summed}, "tier", "{tier}", "", "")'))
    return _first_present(alternatives, on=f"{BY_TARGET}, tier")


def _scaled_quantiles(histogram: str, window: str, q: float, by: str) -> str:
    """histogram_quantile per engine, in seconds (SGLang's P/D transfer histogram counts ms: a
    quantile of its buckets times the table's scale)."""
    parts = []
    for spec in ENGINES:
        for base in spec.histograms.get(histogram, ()):
            rate = f"rate({_selector(f'{base}_bucket')}[{window}])"
            quantile = f"histogram_quantile({q!r}, sum by ({by}, le) ({_with_model(rate, spec.model_label)}))"
            scale = spec.histogram_scale.get(histogram, 1.0)
            parts.append(f"({quantile} * {scale!r})" if scale != 1.0 else f"({quantile})")
    return "(" + "\nor\n".join(parts) + ") >= -Inf"


def _tier_rules(window: str) -> list[Rule]:
    """KV tiers and the P/D transfer (docs/engines.md, "Tiers, P/D and MoE"), per target and fleet-wide."""
    w, fleet = {"window": window}, {"window": window, "target": ""}
    rules = []
    kinds = _tier_kinds()
    for kind in kinds:
        expr = _tier_counter(kind, window)
        if expr:
            rules.append(Rule(_tier_name(kind), expr, w))
    ratios = {"inference_kv_tier_load_mean_seconds": ("kv_load_time", "kv_loads"),
              "inference_kv_tier_hit_ratio": ("kv_tier_hits", "kv_tier_queries")}
    # Loaded back per evicted: in tokens where the engine counts them, else in bytes.
    reload = [("kv_load_tokens", "kv_evicted_tokens"), ("kv_load_bytes", "kv_store_bytes")]

    def ratio(above: str, below: str, total: bool) -> str:
        def ref(kind: str) -> str:
            return f"sum by (model, tier) ([[{_tier_name(kind)}]])" if total else f"[[{_tier_name(kind)}]]"
        return f"{ref(above)} / ({ref(below)} > 0)"

    rules += [Rule(_tier_name(kind), f"sum by (model, tier) ([[{_tier_name(kind)}]])", fleet, fleet=True)
              for kind in kinds if kind in TIER_RATES]
    for total, labels in ((False, w), (True, fleet)):
        rules += [Rule(name, ratio(*pair, total), labels, fleet=total) for name, pair in ratios.items()]
        rules.append(Rule("inference_kv_tier_reload_ratio",
                          "\nor\n".join(f"({ratio(*pair, total)})" for pair in reload), labels, fleet=total))
    for histogram in TIER_HISTOGRAMS:
        bucket = f"[[inference:{histogram}_bucket:rate]]"
        rules.append(Rule(bucket[2:-2], _tier_buckets(histogram, window), w))
        name = f"inference_kv_tier_{histogram.removeprefix('kv_')}_seconds"
        for q in QUANTILES:
            rules.append(Rule(name, f"histogram_quantile({q!r}, {bucket}) >= -Inf", {**w, "quantile": repr(q)}))
            rules.append(Rule(name, f"histogram_quantile({q!r}, sum by (model, tier, le) ({bucket})) >= -Inf",
                              {**fleet, "quantile": repr(q)}, fleet=True))
    for q in QUANTILES:
        rules.append(Rule("inference_pd_transfer_seconds", _scaled_quantiles("pd_transfer", window, q, BY_TARGET),
                          {**w, "quantile": repr(q)}))
        rules.append(Rule("inference_pd_transfer_seconds", _scaled_quantiles("pd_transfer", window, q, "model"),
                          {**fleet, "quantile": repr(q)}, fleet=True))
    return rules + _pd_rules(window)


def _pd_rules(window: str) -> list[Rule]:
    """P/D: failures and bytes per second, and the mean transfer time over the mean TTFT."""
    w, fleet = {"window": window}, {"window": window, "target": ""}
    seconds = _counter("pd_transfer_seconds_sum", window)
    milliseconds = _counter("pd_transfer_ms_sum", window)
    counters = {"inference_pd_transfer_failures_per_second": _counter("pd_transfer_failures", window),
                "inference_pd_transfer_bytes_per_second": _counter("pd_transfer_bytes", window),
                "inference:pd_transfer_seconds_sum:rate": f"({seconds})\nor\n(({milliseconds}) / 1000)",
                "inference:pd_transfer_count:rate": _counter("pd_transfer_count", window),
                "inference:ttft_sum:rate": _counter("ttft_sum", window),
                "inference:ttft_count:rate": _counter("ttft_count", window)}
    rules = [Rule(name, expr, w) for name, expr in counters.items() if expr]

    def share(ref: Callable[[str], str]) -> str:
        transfer = f"{ref('inference:pd_transfer_seconds_sum:rate')} / ({ref('inference:pd_transfer_count:rate')} > 0)"
        ttft = f"{ref('inference:ttft_sum:rate')} / ({ref('inference:ttft_count:rate')} > 0)"
        return f"({transfer})\n/ (({ttft}) > 0)"

    rules.append(Rule("inference_pd_transfer_ttft_share_ratio", share(lambda n: f"[[{n}]]"), w))
    rules.append(Rule("inference_pd_transfer_ttft_share_ratio", share(lambda n: f"sum by (model) ([[{n}]])"),
                      fleet, fleet=True))
    rules += [Rule(name, f"sum by (model) ([[{name}]])", fleet, fleet=True)
              for name in ("inference_pd_transfer_failures_per_second", "inference_pd_transfer_bytes_per_second")]
    return rules


def tier_gauge_rules() -> list[Rule]:
    """Each offload tier's used share of its capacity (SGLang's HiCache host pool)."""
    def per_tier(kind: str) -> str:
        keys = dict.fromkeys(key for spec in ENGINES for key in spec.gauges if key.partition("/")[0] == kind)
        return "\nor\n".join(f'(label_replace({_gauge(key)}, "tier", "{key.partition("/")[2]}", "", ""))'
                             for key in keys)

    return [Rule("inference:kv_tier_used", per_tier("kv_tier_used")),
            Rule("inference:kv_tier_capacity", per_tier("kv_tier_capacity")),
            Rule("inference_kv_tier_usage_ratio", "[[inference:kv_tier_used]] / ([[inference:kv_tier_capacity]] > 0)")]


def window_rules(window: str, baseline: str, min_coverage: float = 0.9) -> list[Rule]:
    """The rules of one window, in evaluation order (later rules read earlier ones)."""
    w = {"window": window}
    rules = [Rule(name, expr, w) for metric, name in _RATES.items() if (expr := _counter(metric, window))]
    rules.append(Rule("inference:errors:rate",
                      f"{_counter('errors', window)}\nor on ({BY_TARGET})\n([[inference_requests_per_second]] * 0 "
                      f"and on (target) {_error_counting_targets()})", w))
    rules.extend(_http_rules(window))
    rules.append(Rule("inference_request_error_ratio", _error_ratio("[[inference:errors:rate]]",
                      "[[inference_requests_per_second]]", "[[inference:http_errors:rate_model]]",
                      "[[inference:http_requests:rate_model]]", "target, model"), w))
    rules.extend(_ratio_rules(window))
    rules.extend(_position_rules(window))
    rules.append(Rule("inference:generation_tokens:rate_baseline",
                      f"({_counter('generation_tokens', baseline, f' offset {window}')})\n"
                      f"and on ({BY_TARGET})\n({_covered(window, baseline, min_coverage)})", w))
    rules.append(Rule("inference_throughput_baseline_ratio", "[[inference_generation_tokens_per_second]] / "
                      "([[inference:generation_tokens:rate_baseline]] > 0)", w))
    rules.extend(_baseline_ratio_rules(window, baseline, min_coverage))
    for histogram in _SUMMARIES:
        rules.append(Rule(f"inference:{histogram}_bucket:rate", _buckets(histogram, window), w))
    for histogram, name in _SUMMARIES.items():
        for q in QUANTILES:
            # No observations: histogram_quantile gives NaN, the monitor no sample; `>= -Inf` drops NaN.
            expr = f"histogram_quantile({q!r}, [[inference:{histogram}_bucket:rate]]) >= -Inf"
            rules.append(Rule(name, expr, {**w, "quantile": repr(q)}))
    return rules + _tier_rules(window) + _fleet_rules(window)


def _ratio_rules(window: str) -> list[Rule]:
    """Ratios of two counters' rates (prefix-cache hits / lookups, busy seconds / tokens); no series
    while the denominator's rate is 0, as the monitor gives no sample."""
    w = {"window": window}
    rules = []
    for counter in dict.fromkeys(c for numerator, denominator, _ in RATIOS.values() for c in (numerator, denominator)):
        if counter in _RATES:
            continue  # recorded already under its exported name
        expr = _counter(counter, window)
        if expr:
            rules.append(Rule(f"inference:{counter}:rate", expr, w))
    for ours, (numerator, denominator, added) in RATIOS.items():
        ratio = f"[[{_rate_name(numerator)}]] / ([[{_rate_name(denominator)}]] > 0)"
        rules.append(Rule(f"inference_{ours}", f"{added!r} + {ratio}" if added else ratio, w))
    return rules


def _baseline_ratio_rules(window: str, baseline: str, min_coverage: float) -> list[Rule]:
    """The ratios' baselines (same window and coverage rule as the throughput's) and the window's
    ratio over its baseline's."""
    w = {"window": window}
    rules = []
    for counter in dict.fromkeys(c for ours in BASELINE_RATIOS for c in RATIOS[ours][:2]):
        expr = _counter(counter, baseline, f" offset {window}")
        if expr:
            rules.append(Rule(f"inference:{counter}:rate_baseline",
                              f"({expr})\nand on ({BY_TARGET})\n({_covered(window, baseline, min_coverage)})", w))
    for ours, (baseline_name, over_name) in BASELINE_RATIOS.items():
        numerator, denominator, added = RATIOS[ours]
        ratio = f"[[inference:{numerator}:rate_baseline]] / ([[inference:{denominator}:rate_baseline]] > 0)"
        rules.append(Rule(f"inference_{baseline_name}", f"{added!r} + {ratio}" if added else ratio, w))
        rules.append(Rule(f"inference_{over_name}", f"[[inference_{ours}]] / ([[inference_{baseline_name}]] > 0)", w))
    return rules


def _position_rules(window: str) -> list[Rule]:
    """Accepted draft tokens per position over the drafts (vLLM's accepted_tokens_per_pos)."""
    w = {"window": window}
    alternatives = []
    for spec in ENGINES:
        entry = spec.counters_by.get("spec_accepted_pos")
        if entry is not None:
            selector, label = entry
            rate = f"rate({_selector(selector.sample, selector.match, selector.exclude)}[{window}])"
            alternatives.append((spec.engine, f"sum by ({BY_TARGET}, {label}) ({_with_model(rate, spec.model_label)})"))
    if not alternatives:
        return []
    return [Rule("inference:spec_accepted_pos:rate", _first_present(alternatives, f"{BY_TARGET}, position"), w),
            Rule("inference_spec_decode_position_acceptance_ratio", "[[inference:spec_accepted_pos:rate]]\n"
                 f"/ on ({BY_TARGET}) group_left ()\n([[{_rate_name('spec_drafts')}]] > 0)", w)]


def _rate_name(counter: str) -> str:
    return _RATES.get(counter, f"inference:{counter}:rate")


def _covered(window: str, baseline: str, min_coverage: float) -> str:
    """Where the history reaches back over `min_coverage` of the baseline: a sample in
    (start - 2B, start - c*B] with start = now - window (as monitor.service.derive.window_rates)."""
    window_ms, baseline_ms = round(Duration(window).seconds * 1000), round(Duration(baseline).seconds * 1000)
    reach_ms = round(baseline_ms * min_coverage)
    offset = f" offset {_duration(window_ms + reach_ms)}"
    return _counter("generation_tokens", _duration(2 * baseline_ms - reach_ms), offset, func="count_over_time") or ""


def _duration(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _http_rules(window: str) -> list[Rule]:
    """HTTP 5xx ratio of the OpenAI API handlers, attributed to a target's model when it serves one."""
    everything, errors = [], []
    for sample, (route, status) in HTTP_LABELS.items():
        api = f'{route}=~"{re.escape(HTTP_API_PREFIX)}.*"'
        everything.append(f"rate({_selector(sample)[:-1]}, {api}}}[{window}])")
        errors.append(f'rate({_selector(sample)[:-1]}, {api}, {status}=~"5.*"}}[{window}])')
    single = ("([[inference_requests_per_second]] * 0 + 1) and on (target) "
              "(count by (target) ([[inference_requests_per_second]]) == 1)")
    w = {"window": window}
    return [
        Rule("inference:http_requests:rate", f"sum by (target) ({' or '.join(everything)})", w),
        Rule("inference:http_errors:rate", f"sum by (target) ({' or '.join(errors)})\n"
             "or on (target)\n[[inference:http_requests:rate]] * 0", w),
        Rule("inference:http_requests:rate_model",
             f"[[inference:http_requests:rate]] * on (target) group_right () ({single})", w),
        Rule("inference:http_errors:rate_model",
             f"[[inference:http_errors:rate]] * on (target) group_right () ({single})", w),
    ]


def _error_ratio(errors: str, requests: str, http_errors: str, http_all: str, by: str) -> str:
    # The worse of the engine's ratio and the HTTP layer's, never their sum (they overlap).
    return (f'max by ({by}) (\n  label_replace({errors} / ({requests} > 0), "source", "engine", "", "")\n'
            f'  or\n  label_replace({http_errors} / ({http_all} > 0), "source", "http", "", "")\n)')


def _fleet_rules(window: str) -> list[Rule]:
    """Fleet-wide: the per-target series summed by model (recorded series carry no `job`).

    `target: ""` in their labels removes nothing they have (an empty label is no label) but tells
    them apart from the per-target rules of the same name for `promtool check rules`' lint.
    """
    w = {"window": window, "target": ""}

    def total(name: str, by: str = "model") -> str:
        return f"sum by ({by}) ([[{name}]])"

    rules = [Rule(name, total(name), w, fleet=True) for name in _RATES.values()]
    rules.append(Rule("inference_request_error_ratio", _error_ratio(
        total("inference:errors:rate"), total("inference_requests_per_second"),
        total("inference:http_errors:rate_model"), total("inference:http_requests:rate_model"), "model"),
        w, fleet=True))
    for ours, (numerator, denominator, added) in RATIOS.items():
        ratio = f"{total(_rate_name(numerator))} / ({total(_rate_name(denominator))} > 0)"
        rules.append(Rule(f"inference_{ours}", f"{added!r} + {ratio}" if added else ratio, w, fleet=True))
    rules.append(Rule("inference_spec_decode_position_acceptance_ratio",
                      f"{total('inference:spec_accepted_pos:rate', 'model, position')}\n/ on (model) group_left ()\n"
                      f"({total(_rate_name('spec_drafts'))} > 0)", w, fleet=True))
    # Of the targets that have a baseline: a new target's traffic is not a rise against the others'.
    covered = ("[[inference_generation_tokens_per_second]] and on (target, model) "
               "[[inference:generation_tokens:rate_baseline]]")
    rules.append(Rule("inference_throughput_baseline_ratio", f"sum by (model) ({covered})"
                      f" / ({total('inference:generation_tokens:rate_baseline')} > 0)", w, fleet=True))
    for ours, (baseline_name, over_name) in BASELINE_RATIOS.items():
        numerator, denominator, added = RATIOS[ours]
        now = f"{total(_rate_name(numerator))} / ({total(_rate_name(denominator))} > 0)"
        base = (f"{total(f'inference:{numerator}:rate_baseline')} / "
                f"({total(f'inference:{denominator}:rate_baseline')} > 0)")
        if added:
            now, base = f"{added!r} + {now}", f"{added!r} + {base}"
        rules.append(Rule(f"inference_{baseline_name}", base, w, fleet=True))
        rules.append(Rule(f"inference_{over_name}", f"({now}) / (({base}) > 0)", w, fleet=True))
    for histogram, name in _SUMMARIES.items():
        buckets = total(f"inference:{histogram}_bucket:rate", "model, le")
        for q in QUANTILES:
            rules.append(Rule(name, f"histogram_quantile({q!r}, {buckets}) >= -Inf",
                              {**w, "quantile": repr(q)}, fleet=True))
    return rules


def slo_rules(window: str, objectives: dict[str, float]) -> list[Rule]:
    """SLO attainment: histogram_fraction over classic buckets needs Prometheus >= 3.4."""
    rules = []
    for objective, seconds in objectives.items():
        labels = {"window": window, "objective": objective}
        bucket = f"inference:{objective}_bucket:rate"
        rules.append(Rule("inference_slo_attainment_ratio",
                          f"histogram_fraction(-Inf, {seconds!r}, [[{bucket}]]) >= -Inf", labels))
        rules.append(Rule("inference_slo_attainment_ratio",
                          f"histogram_fraction(-Inf, {seconds!r}, sum by (model, le) ([[{bucket}]])) >= -Inf",
                          {**labels, "target": ""}, fleet=True))
    return rules


def gauge_rules() -> list[Rule]:
    rules = [Rule("inference_target_up", 'max by (target) (up{target!=""})')]
    rules += [Rule(name, _gauge(metric)) for metric, name in _GAUGES.items()]
    rules += [Rule(name, _gauge(metric, keep=label)) for metric, (name, label) in _LABELLED_GAUGES.items()]
    # A count, so by (target, model) only: the engines in any state but awake.
    rules.append(Rule("inference_engines_sleeping", _gauge("sleep_state", exclude=("awake",))))
    load = "([[inference_rank_requests_running]] + [[inference_rank_requests_waiting]])"
    rules.append(Rule("inference_rank_imbalance_ratio",
                      f"max by ({BY_TARGET}) {load}\n/ (avg by ({BY_TARGET}) {load} > 0)\n"
                      f"and on ({BY_TARGET}) (count by ({BY_TARGET}) {load} > 1)"))
    return rules + tier_gauge_rules()


def render(rule: Rule, window: str | None) -> str:
    """The expression as the rule file holds it: references become selectors of recorded series."""
    # Recorded series have no `job`: the same names scraped from a monitor (which have one) and the
    # fleet-wide series (no `target`) stay out.
    matchers = ", ".join(['job=""', 'target!=""', *([f'window="{window}"'] if window else [])])
    return _REF.sub(lambda m: f"{m.group(1)}{{{matchers}}}", rule.expr)


def expand(rule: Rule, rules: Sequence[Rule]) -> str:
    """The expression with every reference replaced by the referenced (per-target) rule's own, inline."""
    per_target = {r.record: r for r in rules if not r.fleet and "quantile" not in r.labels}
    return _REF.sub(lambda m: f"({expand(per_target[m.group(1)], rules)})", rule.expr)


HEADER = """\
# Generated by `infermon rules recording`: do not edit, regenerate (the tests check it is current).
# Computes the monitor's service series inside Prometheus from the engines' own metrics. The scrape
# configuration sets a `target` label on every engine (see deploy/prometheus/prometheus.yml).
# inference_slo_attainment_ratio needs Prometheus >= 3.4 (histogram_fraction on classic buckets).
"""


def rule_file_text(windows: Sequence[str], baseline: str, objectives: dict[str, float],
                   min_coverage: float = 0.9) -> str:
    return HEADER + yaml.dump(rule_file(windows, baseline, objectives, min_coverage), Dumper=_BlockDumper,
                              sort_keys=False,
                              width=1_000_000, allow_unicode=True)


class _BlockDumper(yaml.SafeDumper):
    """Multi-line expressions as literal blocks (`expr: |`), as people write rule files."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def rule_file(windows: Sequence[str], baseline: str, objectives: dict[str, float],
              min_coverage: float = 0.9) -> dict[str, Any]:
    groups: list[dict[str, Any]] = []
    for window in windows:
        rules = window_rules(window, baseline, min_coverage) + slo_rules(window, objectives)
        groups.append({"name": f"inference-service-{window}", "rules": [_entry(r, window) for r in rules]})
    groups.append({"name": "inference-service-gauges", "rules": [_entry(r, None) for r in gauge_rules()]})
    return {"groups": groups}


def _entry(rule: Rule, window: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"record": rule.record, "expr": render(rule, window)}
    if rule.labels:
        entry["labels"] = dict(rule.labels)
    return entry
