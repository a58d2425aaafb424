"""The probable-cause tables: a few rules per layer that turn an alert's context into one cause.

The context is reduced to named signals (below); each rule is data: an id, the layer whose alerts
it explains, conditions on signals (a signal the context lacks fails its condition: an omitted
fact never matches), one sentence, and the line `docs/causes.md` shows for it (that file is
generated from this table: `python -m monitor.alerting.causes > docs/causes.md`; a test keeps them
equal). An alert is explained only by the rules of its own layer, so a quality alert is never
blamed on a GPU and a GPU alert never on an error burst. Within a layer the first rule that
matches wins, so each table runs from the most specific evidence to the most generic: an engine
that is down explains everything; what the engine itself reports (its errors, a full KV cache, a
queue on busy GPUs) comes before the hardware readings under it, because a busy GPU near its power
cap is routine (the recorded H200 shows sw_power_cap whenever it is busy) and explains a slowdown
only where the engine shows none; a throughput drop with an empty queue is less traffic, not a
slower engine; a quality run the judge failed on explains every quality alert of that run.
`unknown` says which facts of the layer were checked.

New engine facts are new signals in `signals` and new rows here, placed above the hardware rows
of `service` (as the prefix cache's hit ratio against its baseline is).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from monitor.alerting.context import Context, TargetFacts
from monitor.config import CauseSettings
from monitor.rulefiles.promql import COMPARISONS

LAYER_TITLES = {"service": "Service alerts (and canary, monitor): the service and GPU layers",
                "infra": "GPU alerts: that GPU and the targets it serves",
                "quality": "Quality alerts: the model's quality run",
                "cost": "Cost alerts: the cost numbers and the throughput of the model's targets",
                "trend": "Trend alerts (a creep or a step of a target's latency): the last 6 hours against the "
                         "same hours a week before"}


@dataclass(frozen=True)
class Condition:
    signal: str
    op: str
    threshold: str | float  # a CauseSettings field name, or a number


@dataclass(frozen=True)
class CauseRule:
    id: str
    layer: str  # service | infra | quality | cost: the alerts it may explain
    when: tuple[Condition, ...]
    sentence: str  # formatted with the signals' texts ({kv_cache}, {gpus}, ...)
    doc: str  # when it matches, in words (docs/causes.md)


def _c(signal: str, op: str, threshold: str | float) -> Condition:
    return Condition(signal, op, threshold)


CAUSES: tuple[CauseRule, ...] = (
    # ---- service ------------------------------------------------------------------------------
    # A GPU fault under the target explains the rest (a GPU that fell off the bus takes its engine down).
    CauseRule("gpu_fault", "service", (_c("gpu_fault", ">", 0),),
              "{faulty_gpus} under the target reports {gpu_faults}: a GPU hardware fault (its GPU alert says "
              "what to do: docs/runbooks/infra.md).",
              "a GPU serving the target logged an XID in the last hour, counts uncorrectable ECC errors or "
              "failed a row remap"),
    CauseRule("target_down", "service", (_c("target_up", "==", 0),),
              "{down_targets} does not answer its metrics page: the engine is down or unreachable.",
              "a target of the alert does not answer"),
    CauseRule("engine_unrecognised", "service", (_c("engine_unrecognized", ">", 0),),
              "{unrecognized_targets} answers its metrics page, but with no serving engine's metrics on it: "
              "set `engine:` or `metric_prefix:` on the target, or point it at the engine's own page.",
              "a target of the alert answers with a page that matches no engine table"),
    CauseRule("engine_asleep", "service", (_c("engines_sleeping", ">", 0),),
              "{engines_sleeping} engine(s) of the target are asleep (vLLM sleep mode): they serve nothing "
              "until woken (POST /wake_up).",
              "an engine of the alert's target is in a sleep state (vllm:engine_sleep_state)"),
    # P/D transfers that fail lose the request's KV: they explain the errors they cause (alerts/kv.yml).
    CauseRule("pd_transfer", "service", (_c("pd_transfer_failures", ">", "pd_transfer_failures_per_second"),),
              "{pd_transfer_failures} prefill-to-decode KV transfers/s fail: those requests are aborted or computed "
              "again (docs/runbooks/kv-tiers.md).",
              "P/D KV transfers (or their bootstraps) fail faster than pd_transfer_failures_per_second"),
    CauseRule("engine_errors", "service", (_c("target_up", "==", 1), _c("error_ratio", ">=", "error_ratio")),
              "the engine answers but fails {error_ratio} of its requests itself.",
              "error ratio >= error_ratio (over the alert's window) on a target that answers"),
    # KV offloading and P/D disaggregation (alerts/kv.yml): a TTFT that grew by the swap back or the
    # transfer, which the engine measures itself; above the KV-cache and queue rows (a full cache and
    # a queue come with a slow tier: the tier is the specific evidence).
    CauseRule("kv_swap_back", "service", (_c("kv_swap_back", ">=", "kv_swap_back_seconds"),),
              "loading offloaded KV back from the {kv_swap_back_tier} tier takes {kv_swap_back} at P99: requests "
              "whose prefix was offloaded wait for it before their first token (docs/runbooks/kv-tiers.md).",
              "P99 of a KV offload tier's load back into GPU memory >= kv_swap_back_seconds"),
    CauseRule("pd_transfer", "service", (_c("pd_transfer_share", ">=", "pd_transfer_share_ratio"),),
              "moving the prefill's KV to decode takes {pd_transfer_share} of the mean time to first token "
              "(docs/runbooks/kv-tiers.md).",
              "the mean P/D KV transfer time >= pd_transfer_share_ratio of the mean TTFT"),
    CauseRule("kv_tier_thrashing", "service", (_c("kv_reload", ">=", "kv_thrash_reload_ratio"),
                                               _c("kv_reload", "<=", 1.25), _c("kv_tier_loads", ">", 1.0)),
              "the offload tier loads back {kv_reload} of the KV the GPU evicts to it ({kv_tier_loads} loads/s): "
              "GPU memory is too small for the working set, the same blocks go back and forth "
              "(docs/runbooks/kv-tiers.md).",
              "KV loaded back from a tier >= kv_thrash_reload_ratio (and <= 1.25) of the KV evicted to it, "
              "at more than 1 load/s"),
    CauseRule("moe_imbalance", "service", (_c("moe_balancedness", "<", "moe_balancedness_ratio"),),
              "MoE experts are unevenly loaded (balancedness {moe_balancedness}, 1 = even): the busiest GPU of the "
              "expert-parallel group holds every step back (docs/runbooks/kv-tiers.md).",
              "MoE expert balancedness (mean over max load per GPU) < moe_balancedness_ratio"),
    CauseRule("kv_cache_pressure", "service", (_c("kv_cache", ">=", "kv_cache_ratio"),
                                               _c("preemptions", ">", "preemptions_per_second")),
              "the KV cache is {kv_cache} full and the engine preempts {preemptions} requests/s to make room.",
              "KV cache >= kv_cache_ratio and preemptions/s > preemptions_per_second"),
    CauseRule("rank_imbalance", "service", (_c("waiting", ">=", "queue_waiting"),
                                            _c("rank_imbalance", ">=", "rank_imbalance_ratio")),
              "{waiting} requests wait while the busiest data-parallel rank holds {rank_imbalance} the mean "
              "load: one rank is hot, the others have room (the balancing, not capacity).",
              "waiting >= queue_waiting and the busiest rank's load (running + waiting) >= rank_imbalance_ratio "
              "x the mean of the ranks"),
    CauseRule("queue_saturation", "service", (_c("waiting", ">=", "queue_waiting"),
                                              _c("gpu_utilization", ">=", "gpu_busy_ratio")),
              "{waiting} requests wait while the GPUs are {gpu_utilization} busy: more load than capacity.",
              "waiting >= queue_waiting while the GPUs are >= gpu_busy_ratio busy"),
    CauseRule("queue_saturation", "service", (_c("waiting", ">=", "queue_waiting"), _c("gpu_readings", "==", 0),
                                              _c("running", ">", 0)),
              "{waiting} requests wait behind {running} running (no GPU readings for it): more load than capacity.",
              "... or, with no GPU readings for the target, while it runs requests"),
    CauseRule("prefix_cache_drop", "service", (_c("prefix_cache_baseline", "<", "prefix_cache_baseline_ratio"),
                                               _c("prefix_cache_was", ">=", "prefix_cache_min_ratio"),
                                               _c("prefix_cache_requests", ">=", "prefix_cache_min_requests")),
              "the prefix cache finds {prefix_cache} of the prompt tokens against {prefix_cache_was} over its "
              "baseline: more of every prompt is computed again (a changed system prompt or template, lost "
              "cache affinity, or prefixes evicted), so prefills take longer.",
              "the prefix-cache hit ratio < prefix_cache_baseline_ratio of its baseline's, which was "
              ">= prefix_cache_min_ratio, over >= prefix_cache_min_requests requests in the window"),
    CauseRule("gpu_memory", "service", (_c("gpu_memory", ">=", "gpu_memory_ratio"),),
              "GPU memory is {gpu_memory} used on {gpus}: out-of-memory risk.",
              "GPU memory used >= gpu_memory_ratio"),
    CauseRule("gpu_throttling", "service", (_c("gpu_throttled", ">", 0),),
              "the clocks of {throttled_gpus} are held back ({throttle_reasons}): the GPUs run slower than they can.",
              "one of throttle_reasons active on the GPUs"),
    CauseRule("traffic_drop", "service", (_c("throughput_baseline", "<", "throughput_baseline_ratio"),
                                          _c("waiting", "==", 0)),
              "throughput is at {throughput_baseline} of its baseline with nobody waiting: less traffic, "
              "not a slower engine.",
              "throughput < throughput_baseline_ratio of its baseline, nobody waiting"),
    # ---- infra: a GPU alert -------------------------------------------------------------------
    CauseRule("gpu_lost", "infra", (_c("gpu_down", ">", 0),),
              "{down_gpus} gives no readings: the GPU is lost or its source failed.",
              "the GPU gives no readings"),
    CauseRule("gpu_fault", "infra", (_c("gpu_fault", ">", 0),),
              "{faulty_gpus} reports {gpu_faults}: a hardware fault, not load (docs/runbooks/infra.md).",
              "the GPU logged an XID in the last hour, counts uncorrectable ECC errors or failed a row remap"),
    CauseRule("gpu_memory", "infra", (_c("gpu_memory", ">=", "gpu_memory_ratio"),),
              "GPU memory is {gpu_memory} used on {gpus}: out-of-memory risk.",
              "GPU memory used >= gpu_memory_ratio"),
    CauseRule("queue_saturation", "infra", (_c("waiting", ">=", "queue_waiting"),
                                            _c("gpu_utilization", ">=", "gpu_busy_ratio")),
              "{gpus} is {gpu_utilization} busy with {waiting} requests waiting on {served}: more load than capacity.",
              "its targets have waiting >= queue_waiting while it is >= gpu_busy_ratio busy"),
    CauseRule("serving_load", "infra", (_c("running", ">", 0), _c("gpu_utilization", ">=", "gpu_busy_ratio")),
              "{gpus} is {gpu_utilization} busy running {running} requests of {served}: load, not a fault.",
              "its targets run requests while it is >= gpu_busy_ratio busy"),
    CauseRule("gpu_throttling", "infra", (_c("gpu_throttled", ">", 0),),
              "the clocks of {throttled_gpus} are held back ({throttle_reasons}): the GPU runs slower than it can.",
              "one of throttle_reasons active on it"),
    CauseRule("gpu_idle", "infra", (_c("targets_on_gpu", ">", 0), _c("running", "==", 0)),
              "{served} runs no request on {gpus}: paid capacity without work.",
              "the targets it serves run no request"),
    # ---- quality: the model's run -------------------------------------------------------------
    CauseRule("judge_failing", "quality", (_c("run_failed", ">", 0),),
              "{failed}: the run's numbers are the judge's failure, not the model's quality.",
              "the run failed: judge errors > 20 % or under half the sample with a usable verdict, or the judge "
              "disagreed with the known answers judged among the samples (uncalibrated)"),
    CauseRule("judge_changed", "quality", (_c("judge_changed", ">", 0),),
              "{judge_changed}: the score moved with the judge, not with the model; re-judge the baseline days "
              "with today's judge to compare like for like.",
              "the judge differs from the baseline days' (model, endpoint model, template, rubric, or its "
              "agreement with the known answers)"),
    CauseRule("small_sample", "quality", (_c("samples", "<", "quality_min_samples"),),
              "only {samples} of {sampled} sampled responses have a usable verdict: one day's numbers are noisy.",
              "fewer usable verdicts than quality_min_samples"),
    CauseRule("refusals_rose", "quality", (_c("refusal_baseline", ">=", "refusal_baseline_ratio"),),
              "the model refused {refusal_ratio} of its answers, {refusal_baseline} times the baseline days': "
              "refusals score low and run short.",
              "refusal ratio >= refusal_baseline_ratio times the baseline's"),
    CauseRule("length_changed", "quality", (_c("length_change_size", ">=", "length_change_ratio"),),
              "the answers' mean length moved {length_change} against the baseline days: a changed model, "
              "prompt template or traffic mix.",
              "mean output length moved >= length_change_ratio"),
    CauseRule("length_shape_changed", "quality", (_c("length_psi", ">=", "length_psi"),),
              "the answers' lengths are distributed unlike the baseline days' (PSI {length_psi}) while their mean "
              "moved {length_change}: more short and more long answers (a changed traffic mix, max_tokens or stop "
              "sequences); the run's report shows both distributions.",
              "the population stability index of the output lengths against the baseline days >= length_psi"),
    CauseRule("score_fell", "quality", (_c("score_delta", "<=", "score_baseline_delta"),),
              "the judge scored the answers {score_delta} below the baseline days, with refusals and lengths "
              "as usual: the answers themselves got worse.",
              "mean score <= score_baseline_delta below the baseline's"),
    CauseRule("hallucinations", "quality", (_c("hallucination", ">", "hallucination_ratio"),),
              "the judge flagged {hallucination} of the answers as hallucinated.",
              "hallucination share > hallucination_ratio"),
    # ---- trend: what changed over the same days (the history's week-over-week facts) ----------
    # A step that began with a change of the target's engine (engine, generation or version) is the change's.
    CauseRule("trend_engine_change", "trend", (_c("trend_change_minutes", "<=", 60),
                                               _c("trend_change_step", ">=", 1.08)),
              "the latency stepped up {trend_change_step} within {trend_change_minutes} of the engine change "
              "{trend_change}: the new engine or its configuration; compare its release notes and flags, roll "
              "back or accept the new level.",
              "the target's engine, generation or version changed within 60 minutes of a latency step of +8 % or more"),
    CauseRule("trend_hardware", "trend", (_c("trend_gpu_power", "<=", "trend_gpu_ratio"),),
              "the GPUs serving the target draw {trend_gpu_power} of their power of a week ago at the same hours: "
              "hardware (a power cap, throttling, a failing fan); check inference_gpu_clock_event_active.",
              "the target's GPUs draw at most trend_gpu_ratio of their power of the same hours a week before"),
    CauseRule("trend_hardware", "trend", (_c("trend_gpu_clock", "<=", "trend_gpu_ratio"),),
              "the GPUs serving the target run at {trend_gpu_clock} of their SM clock of a week ago: hardware "
              "(throttling); check inference_gpu_clock_event_active.",
              "the target's GPUs' SM clock at most trend_gpu_ratio of a week before"),
    CauseRule("trend_load", "trend", (_c("trend_load", ">=", "trend_load_ratio"),),
              "the latency grew with the load: {trend_load} of the requests/s of the same hours a week ago: "
              "capacity (add replicas or GPUs, or cap the load).",
              "requests/s at least trend_load_ratio of the same hours a week before"),
    CauseRule("trend_cache", "trend", (_c("trend_kv_cache", ">=", "trend_cache_ratio"),),
              "at the same load, KV-cache usage is {trend_kv_cache} of a week ago: the engine's cache (fragmentation, "
              "longer contexts); a restart or a larger KV budget shows which.",
              "load flat, KV-cache usage at least trend_cache_ratio of a week before"),
    CauseRule("trend_cache", "trend", (_c("trend_preemptions", ">=", "trend_cache_ratio"),),
              "at the same load, the engine preempts {trend_preemptions} as often as a week ago: its KV cache runs "
              "short (fragmentation, longer contexts).",
              "load flat, preemptions/s at least trend_cache_ratio of a week before"),
    CauseRule("trend_prefix_cache", "trend", (_c("trend_prefix_cache_hit", "<=", "trend_prefix_ratio"),),
              "at the same load, the prefix cache hits {trend_prefix_cache_hit} as often as a week ago: more prefill "
              "per request (new prompts or templates, or eviction).",
              "load flat, prefix-cache hit ratio at most trend_prefix_ratio of a week before"),
    # Load, cache and GPUs as they were: a step is named the engine's only where its version or
    # configuration could have changed unseen; a creep is not a change of version at all.
    CauseRule("trend_engine", "trend", (_c("trend_load", "<", "trend_load_ratio"), _c("trend_step", "==", 1),
                                        _c("trend_version_tracked", "==", 0)),
              "the latency stepped up at the same load ({trend_load} of a week ago) with the cache and the GPUs "
              "as they were, and the monitor does not track the engine's version (service.engine_version): "
              "compare the engine's version and configuration before and after the step.",
              "a step, load flat, none of the above, the engine's version not tracked"),
    CauseRule("trend_config", "trend", (_c("trend_load", "<", "trend_load_ratio"), _c("trend_step", "==", 1)),
              "the latency stepped up at the same load ({trend_load} of a week ago) with the cache and the GPUs "
              "as they were and the engine's version unchanged across the step: its configuration (flags set "
              "at a restart) or a traffic mix the monitor does not read (longer prompts, another client).",
              "a step, load flat, none of the above, the engine's version tracked and unchanged"),
    CauseRule("trend_unexplained", "trend", (_c("trend_load", "<", "trend_load_ratio"),),
              "the latency keeps growing at the same load ({trend_load} of a week ago) with the KV cache, the "
              "prefix cache and the GPUs' power and clock as they were: none of the signals the monitor reads "
              "moved with it; a restart of the engine shows whether it is the engine's own state (memory "
              "fragmentation, a leak).",
              "a creep, load flat and none of the above"),
    # ---- cost ---------------------------------------------------------------------------------
    CauseRule("gpu_unpriced", "cost", (_c("unpriced_here", ">", 0),),
              "{unpriced_here} has no price in cost.gpu_prices: its spend is not counted.",
              "the alert's GPU has no price"),
    CauseRule("traffic_drop", "cost", (_c("throughput_baseline", "<", "throughput_baseline_ratio"),),
              "throughput is at {throughput_baseline} of its baseline: the same GPU spend buys fewer tokens.",
              "the model's throughput < throughput_baseline_ratio of its baseline"),
    CauseRule("idle_spend", "cost", (_c("idle_share", ">", "idle_ratio"),),
              "{idle_share} of the spend ({usd_per_hour} $/h) is on idle GPUs: paid capacity without work.",
              "share of the spend on idle GPUs > idle_ratio"),
)


@dataclass(frozen=True)
class Signals:
    values: dict[str, float]
    texts: dict[str, str]


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.4g} %"


def signals(context: Context, settings: CauseSettings) -> Signals:
    """The context reduced to the numbers the tables compare (absent when no fact gives them)."""
    values: dict[str, float] = {}
    texts: dict[str, str] = {}

    def worst(name: str, found: list[float], pick: Callable[[list[float]], float],
              text: Callable[[float], str]) -> None:
        if found:
            values[name] = pick(found)
            texts[name] = text(values[name])

    targets, up_targets = context.targets, [t for t in context.targets if t.up]
    if targets:
        values["target_up"] = 0.0 if any(not t.up for t in targets) else 1.0
        texts["down_targets"] = ", ".join(dict.fromkeys(t.target for t in targets if not t.up))
        unrecognized = [t.target for t in targets if t.up and not t.recognized]
        values["engine_unrecognized"] = float(len(unrecognized))
        texts["unrecognized_targets"] = ", ".join(dict.fromkeys(unrecognized))
    worst("error_ratio", [t.request_error_ratio for t in up_targets if t.request_error_ratio is not None], max, _pct)
    worst("kv_cache", [t.kv_cache_usage_ratio for t in up_targets if t.kv_cache_usage_ratio is not None], max, _pct)
    worst("preemptions", [t.preemptions_per_second for t in up_targets if t.preemptions_per_second is not None],
          max, lambda v: f"{v:.4g}")
    worst("waiting", [t.waiting for t in up_targets if t.waiting is not None], sum, lambda v: f"{v:g}")
    worst("running", [t.running for t in up_targets if t.running is not None], sum, lambda v: f"{v:g}")
    worst("rank_imbalance", [t.rank_imbalance_ratio for t in up_targets if t.rank_imbalance_ratio is not None],
          max, lambda v: f"{v:.3g}x")
    worst("engines_sleeping", [t.engines_sleeping for t in up_targets if t.engines_sleeping is not None],
          sum, lambda v: f"{v:g}")
    worst("throughput_baseline", [t.throughput_baseline_ratio for t in up_targets
                                  if t.throughput_baseline_ratio is not None], min, _pct)
    _tier_signals(up_targets, values, texts)
    _prefix_cache_signals(up_targets, settings, values, texts)
    _gpu_signals(context, settings, values, texts)
    _quality_signals(context, values, texts)
    _cost_signals(context, values, texts)
    _trend_signals(context, values, texts)
    return Signals(values, texts)


def _tier_signals(up_targets: list[TargetFacts], values: dict[str, float], texts: dict[str, str]) -> None:
    """The slowest swap back, the busiest tier's reload ratio, the least balanced experts and the
    largest P/D transfer share and failure rate of the targets."""
    swap_backs = [(t.kv_swap_back_p99_seconds, t.kv_swap_back_tier or "?") for t in up_targets
                  if t.kv_swap_back_p99_seconds is not None]
    if swap_backs:
        p99, tier = max(swap_backs)
        values["kv_swap_back"], texts["kv_swap_back"] = p99, f"{p99 * 1000:.3g} ms"
        texts["kv_swap_back_tier"] = tier
    thrashing = [(t.kv_reload_ratio, t.kv_tier_loads_per_second) for t in up_targets
                 if t.kv_reload_ratio is not None and t.kv_tier_loads_per_second is not None]
    if thrashing:  # the tier that moves the most
        reload, loads = max(thrashing, key=lambda pair: pair[1])
        values["kv_reload"], texts["kv_reload"] = reload, _pct(reload)
        values["kv_tier_loads"], texts["kv_tier_loads"] = loads, f"{loads:.3g}"
    for name, found, pick, text in (
        ("moe_balancedness", [t.moe_expert_balancedness_ratio for t in up_targets], min, lambda v: f"{v:.2f}"),
        ("pd_transfer_share", [t.pd_transfer_ttft_share_ratio for t in up_targets], max, _pct),
        ("pd_transfer_failures", [t.pd_transfer_failures_per_second for t in up_targets], max,
         lambda v: f"{v:.3g}"),
    ):
        numbers = [v for v in found if v is not None]
        if numbers:
            values[name] = pick(numbers)
            texts[name] = text(values[name])


def _prefix_cache_signals(up_targets: list[TargetFacts], settings: CauseSettings, values: dict[str, float],
                          texts: dict[str, str]) -> None:
    """The target whose prefix-cache hit ratio fell furthest against its baseline's (one that had one),
    of those that finished enough requests in the window for the ratio to be the cache's: the hit
    ratio of a window that held a request or two is one prompt's (a fifth of the demo's traffic,
    1.6 requests in a scorecard window, read as a halved cache)."""
    fell = [(t.prefix_cache_hit_ratio / t.prefix_cache_hit_ratio_baseline, t) for t in up_targets
            if t.prefix_cache_hit_ratio is not None and t.prefix_cache_hit_ratio_baseline
            and t.requests is not None and t.requests >= settings.prefix_cache_min_requests]
    if not fell:
        return
    share, worst = min(fell, key=lambda pair: pair[0])
    assert worst.prefix_cache_hit_ratio is not None and worst.prefix_cache_hit_ratio_baseline is not None
    values["prefix_cache_baseline"], texts["prefix_cache_baseline"] = share, _pct(share)
    values["prefix_cache"], texts["prefix_cache"] = worst.prefix_cache_hit_ratio, _pct(worst.prefix_cache_hit_ratio)
    values["prefix_cache_was"] = worst.prefix_cache_hit_ratio_baseline
    texts["prefix_cache_was"] = _pct(worst.prefix_cache_hit_ratio_baseline)
    assert worst.requests is not None
    values["prefix_cache_requests"], texts["prefix_cache_requests"] = worst.requests, f"{worst.requests:.0f}"


def _gpu_signals(context: Context, settings: CauseSettings, values: dict[str, float], texts: dict[str, str]) -> None:
    up_gpus = [g for g in context.gpus if g.up]
    values["gpu_readings"] = float(len(up_gpus))
    if context.layer == "infra":
        down = [g for g in context.gpus if not g.up]
        values["gpu_down"] = float(len(down))
        texts["down_gpus"] = ", ".join(f"GPU {g.node}/{g.gpu}" for g in down)
        served = tuple(dict.fromkeys(t for g in context.gpus for t in g.targets))
        values["targets_on_gpu"] = float(len(served))
        texts["served"] = ", ".join(served)
    for name, found in (("gpu_utilization", [g.utilization_ratio for g in up_gpus]),
                        ("gpu_memory", [g.memory_used_ratio for g in up_gpus])):
        numbers = [v for v in found if v is not None]
        if numbers:
            values[name] = max(numbers)
            texts[name] = _pct(values[name])
    reporting = [g for g in up_gpus if g.clock_events is not None]
    if reporting:
        limiting = set(settings.throttle_reasons)
        throttled = [g for g in reporting if limiting & set(g.clock_events or ())]
        values["gpu_throttled"] = float(len(throttled))
        texts["throttled_gpus"] = ", ".join(f"GPU {g.node}/{g.gpu}" for g in throttled)
        reasons = {r for g in throttled for r in g.clock_events or () if r in limiting}
        texts["throttle_reasons"] = ", ".join(sorted(reasons))
    texts["gpus"] = ", ".join(f"GPU {g.node}/{g.gpu}" for g in up_gpus)
    faulty = [g for g in context.gpus if g.faults]
    values["gpu_fault"] = float(len(faulty))
    texts["faulty_gpus"] = ", ".join(f"GPU {g.node}/{g.gpu}" for g in faulty)
    texts["gpu_faults"] = "; ".join(", ".join(g.faults) for g in faulty)


def _quality_signals(context: Context, values: dict[str, float], texts: dict[str, str]) -> None:
    if len(context.quality) != 1:
        return  # a quality alert names one model: its run
    q = context.quality[0]
    values["run_failed"] = 1.0 if q.failed else 0.0
    texts["failed"] = q.failed or ""
    values["judge_changed"] = 1.0 if q.judge_changed else 0.0
    texts["judge_changed"] = q.judge_changed or ""
    for name, value, text in (
        ("samples", q.samples, lambda v: f"{v:g}"), ("sampled", q.sampled, lambda v: f"{v:g}"),
        ("refusal_ratio", q.refusal_ratio, _pct), ("refusal_baseline", q.refusal_baseline_ratio, lambda v: f"{v:.3g}"),
        ("length_change", q.output_length_mean_change_ratio, lambda v: f"{v * 100:+.3g} %"),
        ("length_psi", q.output_length_psi, lambda v: f"{v:.3g}"),
        ("score_delta", q.score_baseline_delta, lambda v: f"{-v:.3g}"),
        ("hallucination", q.hallucination_ratio, _pct),
    ):
        if value is not None:
            values[name], texts[name] = value, text(value)
    if q.output_length_mean_change_ratio is not None:
        values["length_change_size"] = abs(q.output_length_mean_change_ratio)
        texts["length_change_size"] = texts["length_change"]


def _cost_signals(context: Context, values: dict[str, float], texts: dict[str, str]) -> None:
    cost = context.cost
    if cost is None:
        return
    values["unpriced_gpus"] = float(len(cost.unpriced))
    values["unpriced_here"] = float(len(cost.unpriced_here))
    texts["unpriced_here"] = ", ".join(f"GPU {u}" for u in cost.unpriced_here)
    if cost.idle_ratio is not None:
        values["idle_share"], texts["idle_share"] = cost.idle_ratio, _pct(cost.idle_ratio)
    if cost.usd_per_hour is not None:
        texts["usd_per_hour"] = f"{cost.usd_per_hour:.4g}"


def _trend_signals(context: Context, values: dict[str, float], texts: dict[str, str]) -> None:
    facts = context.trend
    if facts is None:
        return
    for name, value in (("trend_load", facts.load), ("trend_kv_cache", facts.kv_cache),
                        ("trend_preemptions", facts.preemptions), ("trend_prefix_cache_hit", facts.prefix_cache_hit),
                        ("trend_gpu_power", facts.gpu_power), ("trend_gpu_clock", facts.gpu_clock)):
        if value is not None:
            values[name] = value
            texts[name] = _pct(value) if value != float("inf") else "new (none a week ago)"
    values["trend_step"] = 1.0 if facts.step else 0.0
    values["trend_version_tracked"] = 1.0 if facts.version_tracked else 0.0
    if facts.engine_change is not None and facts.engine_change_minutes is not None \
            and facts.engine_change_step is not None:
        values["trend_change_minutes"] = facts.engine_change_minutes
        texts["trend_change_minutes"] = f"{facts.engine_change_minutes:.0f} minutes"
        values["trend_change_step"] = facts.engine_change_step
        texts["trend_change_step"] = f"{(facts.engine_change_step - 1) * 100:+.0f} %"
        texts["trend_change"] = facts.engine_change


def _holds(condition: Condition, values: dict[str, float], settings: CauseSettings) -> bool:
    value = values.get(condition.signal)
    if value is None:
        return False
    threshold = condition.threshold
    limit = float(getattr(settings, threshold)) if isinstance(threshold, str) else threshold
    return COMPARISONS[condition.op](value, limit)


def table(layer: str) -> tuple[CauseRule, ...]:
    return tuple(rule for rule in CAUSES if rule.layer == layer)


def probable_cause(context: Context, settings: CauseSettings, rules: tuple[CauseRule, ...] | None = None) -> str:
    """`<id>: <one sentence>`, from the first rule of the alert's layer whose conditions all hold."""
    found = signals(context, settings)
    rules = table(context.layer) if rules is None else rules
    for rule in rules:
        if all(_holds(c, found.values, settings) for c in rule.when):
            return f"{rule.id}: {rule.sentence.format_map(_Texts(found))}"
    # What was checked: the signals this layer's rules look at, as far as the context gives them.
    looked_at = dict.fromkeys(c.signal for rule in rules for c in rule.when if c.signal not in _KINDS)
    checked = ", ".join(f"{name} {found.texts.get(name, f'{found.values[name]:g}')}"
                        for name in looked_at if name in found.values)
    return f"unknown: nothing stands out in the facts checked ({checked or 'none available'})."


_KINDS = {"gpu_readings", "trend_step", "trend_version_tracked"}  # what kind of alert, not a fact of the world


class _Texts(dict[str, str]):
    def __init__(self, found: Signals) -> None:
        super().__init__({name: f"{value:g}" for name, value in found.values.items()})
        self.update(found.texts)

    def __missing__(self, key: str) -> str:
        return "?"


def markdown(settings: CauseSettings | None = None) -> str:
    """docs/causes.md: every layer's table in the order it is read, with the default thresholds."""
    settings = settings or CauseSettings()
    lines = ["# Probable causes", "",
             "Generated from `monitor/alerting/causes.py` (`python -m monitor.alerting.causes > docs/causes.md`);",
             "a test keeps the two equal. Each firing alert gains a `probable_cause` annotation",
             "(`<id>: <one sentence>`) from the table of its own layer (its `layer` label): the first row",
             "whose conditions all hold wins. Facts hold now: over the alert's own `window`, or the shortest",
             "window for an alert on a current value. A fact the monitor lacks never matches. When no row",
             "matches, the cause is `unknown` and lists the facts checked. Thresholds are",
             "`alerting.causes.<name>` (defaults below).", ""]
    for layer, title in LAYER_TITLES.items():
        lines += [f"## {title}", "", "| id | when |", "|----|------|"]
        lines += [f"| {rule.id} | {rule.doc} |" for rule in table(layer)]
        lines += ["| unknown | none of the above |", ""]
    lines += ["## Thresholds", "", "| name | default |", "|------|---------|"]
    lines += [f"| {name} | {getattr(settings, name)} |" for name in CauseSettings.model_fields]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
