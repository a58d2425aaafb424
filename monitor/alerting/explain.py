"""The two annotations an alert gains when it fires: `context` (a line per fact with its value)
and `probable_cause` (`<id>: <one sentence>`, from the table in causes.py).

    vllm-a model=llama window=5m requests running: 12
    vllm-a model=llama window=5m KV-cache usage: 96.5 %
    GPU node-1/0 utilization: 99 %
    GPU node-1/0 clock events: sw_power_cap
    GPU node-1/0 serves: vllm-a
    quality llama (run 2026-11-30) judge score: 4.1

Numbers keep four significant digits (ratios as percent), so a reader can tell them from
/metrics only by the rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from monitor.alerting.causes import probable_cause
from monitor.alerting.context import Context, CostFacts, GpuFacts, QualityFacts, TargetFacts, Views, build_context
from monitor.config import CauseSettings

CONTEXT = "context"
PROBABLE_CAUSE = "probable_cause"


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.4g} %"


def _num(value: float) -> str:
    return f"{value:.4g}"


# (attribute, label, format) per fact, in the order the lines are written.
_TARGET_LINES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("running", "requests running", _num),
    ("waiting", "requests waiting", _num),
    ("kv_cache_usage_ratio", "KV-cache usage", _pct),
    ("preemptions_per_second", "preemptions/s", _num),
    ("throughput_baseline_ratio", "throughput vs. baseline", _pct),
    ("request_error_ratio", "error ratio", _pct),
    ("requests_per_second", "requests/s", _num),
    ("rank_imbalance_ratio", "busiest rank vs. mean", lambda v: f"{v:.3g}x"),
    ("engines_sleeping", "engines asleep", _num),
    ("prefix_cache_hit_ratio", "prefix-cache hits", _pct),
    ("prefix_cache_hit_ratio_baseline", "prefix-cache hits over the baseline", _pct),
)
_GPU_LINES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("utilization_ratio", "utilization", _pct),
    ("memory_used_ratio", "memory used", _pct),
    ("temperature_celsius", "temperature", lambda v: f"{v:.4g} °C"),
)
_QUALITY_LINES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("score_mean", "judge score", _num),
    ("refusal_ratio", "refusal ratio", _pct),
    ("output_length_psi", "output length PSI", _num),
    ("output_length_mean_change_ratio", "output length mean change", _pct),
    ("samples", "usable verdicts", _num),
    ("judge_errors", "judge errors", _num),
    ("suspect_verdicts", "suspect verdicts", _num),
)
_COST_LINES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("usd_per_hour", "spend $/h", _num),
    ("idle_ratio", "idle share of the spend", _pct),
    ("per_token_baseline_ratio", "$/token vs. baseline", _pct),
)

_TREND_LINES: tuple[tuple[str, str, Callable[[float], str]], ...] = (
    ("load", "requests/s", _pct),
    ("kv_cache", "KV-cache usage", _pct),
    ("preemptions", "preemptions/s", _pct),
    ("prefix_cache_hit", "prefix-cache hit ratio", _pct),
    ("gpu_power", "GPU power (lowest)", _pct),
    ("gpu_clock", "GPU SM clock (lowest)", _pct),
)


def context_text(context: Context) -> str:
    lines: list[str] = []
    for target in context.targets:
        lines += _target_lines(target)
    models: dict[str, list[str]] = {}
    for target in context.targets:
        if target.model:
            models.setdefault(target.target, []).append(target.model)
    for gpu in context.gpus:
        lines += _gpu_lines(gpu, models)
    for quality in context.quality:
        lines += _quality_lines(quality)
    if context.cost is not None:
        lines += _cost_lines(context.cost)
    if context.trend is not None:
        if context.trend.slope is not None:
            lines.append(f"growth: {context.trend.slope}")
        lines += _lines("vs. the same hours a week ago:", context.trend, _TREND_LINES)
        if context.trend.engine_change is not None:
            lines.append(f"engine change: {context.trend.engine_change}")
    return "\n".join(lines)


def _target_lines(facts: TargetFacts) -> list[str]:
    head = facts.target + "".join(f" {k}={v}" for k, v in (("model", facts.model), ("window", facts.window)) if v)
    if not facts.up:
        return [f"{head} up: no (the metrics page does not answer)"]
    return _lines(head, facts, _TARGET_LINES)


def _gpu_lines(facts: GpuFacts, models: Mapping[str, list[str]]) -> list[str]:
    head = f"GPU {facts.node}/{facts.gpu}"
    if not facts.seen:
        lines = [f"{head} readings: none (no GPU source shows it)"]
    else:
        lines = [f"{head} up: no (no readings)"] if not facts.up else _lines(head, facts, _GPU_LINES)
    if facts.up and facts.power_watts is not None:
        limit = facts.power_limit_watts
        of_limit = f" of {limit:.4g} W ({_pct(facts.power_watts / limit)})" if limit else ""
        lines.append(f"{head} power: {facts.power_watts:.4g} W{of_limit}")
    if facts.up and facts.clock_events is not None:
        lines.append(f"{head} clock events: {', '.join(facts.clock_events) or 'none'}")
    if facts.targets:
        served = [f"{t} ({', '.join(models[t])})" if models.get(t) else t for t in facts.targets]
        lines.append(f"{head} serves: {', '.join(served)}")
    return lines


def _quality_lines(facts: QualityFacts) -> list[str]:
    head = f"quality {facts.model} (run {facts.date})"
    failed = [f"{head} failed: {facts.failed}"] if facts.failed else []
    return failed + _lines(head, facts, _QUALITY_LINES)


def _cost_lines(facts: CostFacts) -> list[str]:
    lines = _lines("cost", facts, _COST_LINES)
    if facts.unpriced:
        lines.append(f"cost GPUs without a price: {', '.join(facts.unpriced)}")
    return lines


def _lines(head: str, facts: object, table: tuple[tuple[str, str, Callable[[float], str]], ...]) -> list[str]:
    out = []
    for attribute, label, fmt in table:
        value = getattr(facts, attribute)
        if value is not None:
            out.append(f"{head} {label}: {fmt(value)}")
    return out


def explain(labels: Mapping[str, str], views: Views, settings: CauseSettings) -> dict[str, str]:
    """The annotations to add to an alert with these labels (none when nothing places it)."""
    context = build_context(labels, views)
    if context.empty:
        return {}
    return {CONTEXT: context_text(context), PROBABLE_CAUSE: probable_cause(context, settings)}


class Explainer:
    """Bound to the monitor's live views: `explainer(labels)` is called when an alert fires."""

    def __init__(self, views: Callable[[], Views], settings: CauseSettings) -> None:
        self.views = views
        self.settings = settings

    def __call__(self, labels: Mapping[str, str]) -> dict[str, str]:
        return explain(labels, self.views(), self.settings)
