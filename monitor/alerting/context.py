"""What the other layers showed when an alert fired: a pure function over the monitor's views.

The views are the very objects /metrics renders (service, infra, quality, the target -> GPU map),
so every value here is the value /metrics held at that moment. An alert is placed by its labels:

    target (+ model, window)  -> that target's numbers, its GPUs, its models' last quality run
    node + gpu                -> that GPU, and the targets (and their models) it serves
    model only                -> the targets serving the model

and by its layer (`layer` label), which decides what can explain it: a quality alert gets its
model's quality run only, a cost alert the cost numbers (and the targets of its model), a GPU
alert that GPU and the targets on it, a service alert the service and GPU layers.

Facts hold now: numbers over the alert's own window (its `window` label), or, for an alert on a
current value (a GPU gauge, a down target), over the shortest window — an error burst that has
left the last minute does not explain a GPU alert. A fact the monitor does not have (a GPU that
is down, a field the GPU lacks, no quality run) is left out, never written as 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from monitor.cost.collector import CostView
from monitor.history.changes import step_at_change, version_tracked
from monitor.history.keeper import WEEK, HistoryKeeper, week_over_week
from monitor.history.slope import slope_of
from monitor.history.store import DAY
from monitor.infra.reading import CLOCK_EVENT_REASONS, GpuState, InfraView
from monitor.quality.layer import QualityView
from monitor.rulefiles.trends import QUANTITIES
from monitor.service.derive import WindowStats, rank_imbalance
from monitor.service.view import ServiceView, TargetView
from monitor.topology import TopologyMap


@dataclass(frozen=True)
class Views:
    service: ServiceView
    infra: InfraView
    topology: TopologyMap
    quality: QualityView | None = None  # None: the quality layer is not configured
    cost: CostView | None = None
    history: HistoryKeeper | None = None  # the long-horizon history (a trend alert's week-over-week facts)
    at: float | None = None  # the evaluation time the history is read at


@dataclass(frozen=True)
class TargetFacts:
    target: str
    model: str | None
    window: str | None
    up: bool
    recognized: bool = True  # False: it answers, but with no serving engine's metrics
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage_ratio: float | None = None
    preemptions_per_second: float | None = None
    throughput_baseline_ratio: float | None = None
    request_error_ratio: float | None = None
    requests_per_second: float | None = None
    requests: float | None = None  # requests finished over the window (its rate x its length)
    rank_imbalance_ratio: float | None = None  # busiest data-parallel rank over the mean load
    engines_sleeping: float | None = None  # ranks not awake (vLLM sleep mode)
    prefix_cache_hit_ratio: float | None = None
    prefix_cache_hit_ratio_baseline: float | None = None  # the same over the trailing baseline window
    kv_swap_back_p99_seconds: float | None = None  # the slowest offload tier's P99 load back into GPU memory
    kv_swap_back_tier: str | None = None  # ... and that tier
    pd_transfer_ttft_share_ratio: float | None = None  # mean P/D KV transfer time over mean TTFT
    pd_transfer_failures_per_second: float | None = None
    kv_reload_ratio: float | None = None  # the busiest tier's KV loaded back per KV evicted to it
    kv_tier_loads_per_second: float | None = None  # ... and its loads per second
    moe_expert_balancedness_ratio: float | None = None


@dataclass(frozen=True)
class GpuFacts:
    node: str
    gpu: str
    up: bool
    utilization_ratio: float | None = None
    memory_used_ratio: float | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    clock_events: tuple[str, ...] | None = None  # None: the GPU does not report them
    targets: tuple[str, ...] = ()
    seen: bool = True  # False: no source shows this GPU (mapped, or named by an alert, only)
    faults: tuple[str, ...] = ()  # hardware faults in view: recent XIDs, uncorrectable ECC, a failed row remap


@dataclass(frozen=True)
class QualityFacts:
    model: str
    date: str
    score_mean: float | None = None
    refusal_ratio: float | None = None
    output_length_psi: float | None = None
    output_length_mean_change_ratio: float | None = None
    samples: float | None = None  # usable verdicts
    sampled: float | None = None
    judge_errors: float | None = None
    judge_error_ratio: float | None = None
    suspect_verdicts: float | None = None
    score_baseline_delta: float | None = None
    refusal_baseline_ratio: float | None = None
    hallucination_ratio: float | None = None
    failed: str | None = None  # why the run failed (the judge did)
    judge_changed: str | None = None  # what changed in the judge since the baseline days


@dataclass(frozen=True)
class CostFacts:
    usd_per_hour: float | None = None
    idle_ratio: float | None = None
    unpriced: tuple[str, ...] = ()  # "node/gpu" of every GPU without a price
    unpriced_here: tuple[str, ...] = ()  # ... of those the alert names
    per_token_baseline_ratio: float | None = None  # the alert's model and window


@dataclass(frozen=True)
class TrendFacts:
    """A trend alert's facts: the last 6 hours against the same hours a week before (ratios)."""

    load: float | None = None  # requests/s of the alert's target (and model)
    kv_cache: float | None = None
    preemptions: float | None = None
    prefix_cache_hit: float | None = None
    gpu_power: float | None = None  # the GPUs serving the target
    gpu_clock: float | None = None
    # the engine change (engine, generation, version) of the target nearest to a step of the alert's
    # latency in the last 8 days: "vllm v1 0.32.0 → vllm v1 0.33.0 at ...", the minutes between the
    # two, and the latency's level after the step over before it
    engine_change: str | None = None
    engine_change_minutes: float | None = None
    engine_change_step: float | None = None
    slope: str | None = None  # a creep's "P99 TTFT +3.0 %/day over 21 days, 562 ms now, crosses 1 s in ~20 days"
    step: bool = False  # a step (TTFTP99Step, ...): a change within the week; else a creep (a growth)
    version_tracked: bool = False  # the history knows the target's engine version (service.engine_version)


@dataclass(frozen=True)
class Context:
    targets: tuple[TargetFacts, ...] = ()
    gpus: tuple[GpuFacts, ...] = ()
    quality: tuple[QualityFacts, ...] = ()
    models: tuple[str, ...] = field(default=())  # the models concerned (a GPU alert names them)
    layer: str = "service"  # whose cause table explains the alert
    cost: CostFacts | None = None
    trend: TrendFacts | None = None

    @property
    def empty(self) -> bool:
        return not (self.targets or self.gpus or self.quality or self.cost or self.trend)


# The alert's `layer` label -> the table that explains it (canary probes are the service as users see it).
LAYERS = {"service": "service", "canary": "service", "monitor": "service", "infra": "infra",
          "quality": "quality", "cost": "cost"}


def build_context(labels: Mapping[str, str], views: Views) -> Context:
    """The context of an alert with these labels; empty when the labels place it nowhere we know."""
    layer = LAYERS.get(labels.get("layer", ""), "service")
    if layer == "service" and labels.get("kind") == "trend":
        return _trend_context(labels, views)
    if layer == "quality":
        return _quality_context(labels, views)
    if layer == "cost":
        return _cost_context(labels, views)
    context = _placed_context(labels, views)
    return context if context.empty else replace(context, layer=layer)


def _trend_context(labels: Mapping[str, str], views: Views) -> Context:
    """A creep or a step of a target's latency: the week-over-week facts of its load, its engine's
    cache and its GPUs, from the history (the facts of now, as for any service alert, beside them)."""
    placed = _placed_context(labels, views)
    history, at, target = views.history, views.at, labels.get("target")
    if history is None or at is None or not target:
        return replace(placed, layer="trend")
    match = {"target": target, **({"model": labels["model"]} if labels.get("model") else {})}

    def ratio(name: str, where: Mapping[str, str]) -> float | None:
        return week_over_week(history, name, where, at)

    gpus = views.topology.gpus_of(target)
    power = [r for node, gpu in gpus
             if (r := ratio("inference_gpu_power_watts", {"node": node, "gpu": gpu})) is not None]
    clock = [r for node, gpu in gpus
             if (r := ratio("inference_gpu_sm_clock_hertz", {"node": node, "gpu": gpu})) is not None]
    facts = TrendFacts(
        load=ratio("inference_requests_per_second", match),
        kv_cache=ratio("inference_kv_cache_usage_ratio", match),
        preemptions=ratio("inference_preemptions_per_second", match),
        prefix_cache_hit=ratio("inference_prefix_cache_hit_ratio", match),
        gpu_power=min(power) if power else None,
        gpu_clock=min(clock) if clock else None,
    )
    facts = replace(facts, slope=_slope_text(history, labels, at), step=labels.get("alertname", "").endswith("Step"),
                    version_tracked=version_tracked(history, target, at - WEEK - DAY))
    step = step_at_change(history, labels, at, at - WEEK - DAY)
    if step is not None:
        when = datetime.fromtimestamp(step.change.at, UTC).strftime("%Y-%m-%d %H:%M UTC")
        facts = replace(facts, engine_change=f"{step.change.before} → {step.change.after} at {when}",
                        engine_change_minutes=step.minutes, engine_change_step=step.ratio)
    return replace(placed, layer="trend", trend=facts)


def _slope_text(history: HistoryKeeper, labels: Mapping[str, str], at: float) -> str | None:
    """A creep's growth a day (the rule's own value), how long it has grown, and when it crosses
    the paging threshold at that rate; None for a step or a series that is not creeping."""
    name = labels.get("alertname", "")
    q = next((q for q in QUANTITIES if name.startswith(q.key) and q.compare == "ratio" and q.direction == "up"), None)
    if q is None or name.endswith("Step"):
        return None
    match = {k: labels[k] for k in ("target", "model") if labels.get(k)}
    forecast = q.forecast
    slope = slope_of(history, q, match, at, forecast.threshold if forecast else None)
    if slope is None or slope.per_day is None or slope.now is None:
        return None
    text = f"{q.what} {slope.per_day * 100:+.1f} %/day"
    if slope.days:
        text += f" over {'at least ' if slope.at_least else ''}{slope.days:.0f} days"
    now = f"{slope.now * 1000:.0f} ms" if q.key != "ErrorRatio" and slope.now < 1 else (
        f"{slope.now * 100:.2f} %" if q.key == "ErrorRatio" else f"{slope.now:.2f} s")
    text += f", {now} now"
    if forecast is not None and slope.crosses_in_days is not None:
        text += f", crosses {forecast.shown} in ~{slope.crosses_in_days:.0f} days"
    return text


def _quality_context(labels: Mapping[str, str], views: Views) -> Context:
    """A quality alert is about one model's run: only that run can explain it."""
    model = labels.get("model")
    if not model:
        return Context()
    return Context(quality=_quality_facts(views.quality, (model,)), models=(model,), layer="quality")


def _cost_context(labels: Mapping[str, str], views: Views) -> Context:
    """The cost numbers, and (for a model's cost) the throughput of the targets serving it."""
    cost = views.cost
    if cost is None or not cost.present:
        return Context()
    numbers = cost.numbers
    model, window = labels.get("model"), labels.get("window")
    unpriced = tuple(f"{g.gpu.node}/{g.gpu.gpu}" for g in numbers.unpriced)
    here = f"{labels['node']}/{labels['gpu']}" if labels.get("node") and labels.get("gpu") else None
    placed = _placed_context({"model": model, "window": window or ""}, views) if model else Context()
    facts = CostFacts(numbers.usd_per_hour, numbers.idle_ratio, unpriced,
                      tuple(u for u in unpriced if u == here),
                      numbers.baseline_ratio.get((model, window)) if model and window else None)
    return Context(targets=placed.targets, models=placed.models, layer="cost", cost=facts)


def _placed_context(labels: Mapping[str, str], views: Views) -> Context:
    window = labels.get("window")
    if labels.get("target"):
        target_names: tuple[str, ...] = (labels["target"],)
        gpu_keys = views.topology.gpus_of(labels["target"])
    elif labels.get("node") and labels.get("gpu"):
        gpu_keys = ((labels["node"], labels["gpu"]),)
        target_names = views.topology.targets_of(labels["node"], labels["gpu"])
        if not target_names and not any((g.node, g.gpu) == gpu_keys[0] for g in views.infra.gpus):
            return Context()  # a GPU the monitor does not know (another exporter's, in the fleet)
    elif labels.get("model"):
        target_names = tuple(name for name, t in views.service.targets.items() if labels["model"] in _models(t))
        gpu_keys = tuple(key for name in target_names for key in views.topology.gpus_of(name))
    else:
        return Context()
    model = labels.get("model")
    targets = tuple(facts for name in target_names for facts in _target_facts(views.service, name, model, window))
    gpus = tuple(_gpu_facts(views, key) for key in dict.fromkeys(gpu_keys))
    models = tuple(dict.fromkeys(f.model for f in targets if f.model))
    if model and model not in models:
        models = (*models, model)
    return Context(targets, gpus, _quality_facts(views.quality, models), models)


def _models(target: TargetView) -> list[str]:
    found = {model for model, _ in target.stats}
    for per_model in target.gauges.values():
        found.update(per_model)
    return sorted(found)


def _window(service: ServiceView, wanted: str | None) -> str | None:
    labels = [w.label for w in service.windows]
    if wanted in labels:
        return wanted
    # No window on the alert (a GPU gauge, TargetDown): the shortest, what holds now. The longest
    # would still hold an error burst that ended minutes ago.
    return min(service.windows, key=lambda w: w.seconds).label if service.windows else None


def _target_facts(service: ServiceView, name: str, model: str | None, window: str | None) -> list[TargetFacts]:
    target = service.targets.get(name)
    if target is None or target.stale:
        return []  # stale: the monitor fell behind on it and holds no current fact (it is not down)
    if not target.up:
        return [TargetFacts(name, model, None, up=False)]
    if not target.recognized:
        return [TargetFacts(name, model, None, up=True, recognized=False)]
    window = _window(service, window)
    seconds = next((w.seconds for w in service.windows if w.label == window), None)
    models: list[str | None] = [model] if model else [*_models(target)] or [None]
    return [_one_model(target, m, window, seconds) for m in models]


def _one_model(target: TargetView, model: str | None, window: str | None, seconds: float | None) -> TargetFacts:
    def gauge(key: str) -> float | None:
        return target.gauges.get(key, {}).get(model) if model is not None else None

    stats = target.stats.get((model, window)) if model is not None and window is not None else None
    states = target.labelled.get("sleep_state", {}).get(model, {}) if model is not None else {}
    return TargetFacts(
        target.name, model, window, up=True,
        running=gauge("running"), waiting=gauge("waiting"), kv_cache_usage_ratio=gauge("kv_cache"),
        rank_imbalance_ratio=rank_imbalance(target.labelled).get(model) if model is not None else None,
        engines_sleeping=sum(v for k, v in states.items() if k != "awake") if states else None,
        preemptions_per_second=stats.preemptions_per_second if stats else None,
        throughput_baseline_ratio=stats.throughput_baseline_ratio if stats else None,
        request_error_ratio=stats.error_ratio if stats else None,
        requests_per_second=stats.requests_per_second if stats else None,
        requests=stats.requests_per_second * seconds if stats and stats.requests_per_second is not None
        and seconds is not None else None,
        prefix_cache_hit_ratio=stats.prefix_cache_hit_ratio if stats else None,
        prefix_cache_hit_ratio_baseline=stats.prefix_cache_hit_ratio_baseline if stats else None,
        **_tier_facts(stats),
    )


def _tier_facts(stats: WindowStats | None) -> dict[str, Any]:
    """The slowest tier's swap-back P99 (quantiles "kv_load/<tier>") and the P/D transfer's numbers."""
    if stats is None:
        return {}
    swap_backs = [(q[0.99], key.partition("/")[2]) for key, q in stats.quantiles.items()
                  if key.startswith("kv_load/") and 0.99 in q]
    p99, tier = max(swap_backs) if swap_backs else (None, None)
    busiest = max(((n.get("loads_per_second", 0.0), n) for n in stats.kv_tiers.values() if "reload_ratio" in n),
                  default=None, key=lambda pair: pair[0])
    reload = {} if busiest is None else {"kv_reload_ratio": busiest[1]["reload_ratio"],
                                         "kv_tier_loads_per_second": busiest[0]}
    return {**reload, "moe_expert_balancedness_ratio": stats.moe_expert_balancedness_ratio,
            "kv_swap_back_p99_seconds": p99, "kv_swap_back_tier": tier,
            "pd_transfer_ttft_share_ratio": stats.pd_transfer_ttft_share_ratio,
            "pd_transfer_failures_per_second": stats.pd_transfer_failures_per_second}


def _gpu_facts(views: Views, key: tuple[str, str]) -> GpuFacts:
    node, index = key
    targets = views.topology.targets_of(node, index)
    state: GpuState | None = next((g for g in views.infra.gpus if (g.node, g.gpu) == key), None)
    faults = gpu_faults(state) if state is not None else ()
    if state is None or not state.up or state.reading is None:
        return GpuFacts(node, index, up=False, targets=targets, seen=state is not None, faults=faults)
    reading = state.reading
    mask = reading.clock_event_mask
    events = None if mask is None else tuple(r for r, bit in CLOCK_EVENT_REASONS.items() if mask & bit)
    return GpuFacts(node, index, True, reading.utilization_ratio, reading.memory_used_ratio,
                    reading.temperature_celsius, reading.power_watts, reading.power_limit_watts, events, targets,
                    faults=faults)


def gpu_faults(state: GpuState) -> tuple[str, ...]:
    """The GPU's hardware faults in words: the XIDs of the last hour (a GPU that fell off the bus
    keeps its XID 79), uncorrectable ECC errors since its last reset, a failed row remap."""
    found = list(state.errors.faults) if state.errors is not None else []
    reading = state.reading
    if reading is not None and reading.ecc_uncorrected_errors:
        found.append(f"{reading.ecc_uncorrected_errors:g} uncorrectable ECC errors")
    if reading is not None and reading.row_remap_failed:
        found.append("a failed row remap")
    return tuple(found)


def _quality_facts(quality: QualityView | None, models: tuple[str, ...]) -> tuple[QualityFacts, ...]:
    if quality is None:
        return ()
    out = []
    for model in models:
        result = quality.latest.get(model)
        if result is None:
            continue
        s = result.summary
        out.append(QualityFacts(
            model, result.date, _num(s.score_mean), _num(s.refusal_ratio), _num(s.psi),
            _num(s.output_length_mean_change_ratio), _num(s.samples), _num(s.sampled),
            _num(s.judge_errors), _num(s.judge_error_ratio), _num(s.suspect_verdicts),
            _num(s.score_baseline_delta), _num(s.refusal_baseline_ratio),
            _num(s.hallucination_ratio), s.failed if isinstance(s.failed, str) else None,
            s.judge_changed if isinstance(s.judge_changed, str) else None))
    return tuple(out)


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
