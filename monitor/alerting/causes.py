"""The probable-cause table: a few rules that turn an alert's context into one cause.

The context is reduced to named signals (below); each rule is data: an id, conditions on
signals (a signal the context lacks fails its condition: an omitted fact never matches), and
one sentence. The first rule that matches wins, so the table runs from the most specific
evidence to the most generic: an engine that is down explains everything; what the engine itself
reports (its errors, a full KV cache, a queue on busy GPUs) comes before the hardware readings
under it, because a busy GPU near its power cap is routine (the recorded H200 shows sw_power_cap
whenever it is busy) and explains a slowdown only where the engine shows none; a throughput drop
with an empty queue is less traffic, not a slower engine. `unknown` says which facts were checked.

| id                | when (thresholds: `alerting.causes`)                                     |
|-------------------|--------------------------------------------------------------------------|
| target_down       | a target of the alert does not answer                                    |
| engine_errors     | error ratio >= error_ratio on a target that answers                      |
| kv_cache_pressure | KV cache >= kv_cache_ratio and preemptions/s > preemptions_per_second    |
| queue_saturation  | waiting >= queue_waiting while the GPUs are >= gpu_busy_ratio busy (or,  |
|                   | with no GPU readings for the target, while it runs requests)             |
| gpu_memory        | GPU memory used >= gpu_memory_ratio                                      |
| gpu_throttling    | one of throttle_reasons active on the GPUs                               |
| traffic_drop      | throughput < throughput_baseline_ratio of its baseline, nobody waiting   |
| unknown           | none of the above                                                        |
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

from monitor.alerting.context import Context
from monitor.config import CauseSettings

Op = Callable[[float, float], bool]
OPS: dict[str, Op] = {">=": operator.ge, ">": operator.gt, "<": operator.lt, "==": operator.eq}


@dataclass(frozen=True)
class Condition:
    signal: str
    op: str
    threshold: str | float  # a CauseSettings field name, or a number


@dataclass(frozen=True)
class CauseRule:
    id: str
    when: tuple[Condition, ...]
    sentence: str  # formatted with the signals' texts ({kv_cache}, {gpus}, ...)


def _c(signal: str, op: str, threshold: str | float) -> Condition:
    return Condition(signal, op, threshold)


CAUSES: tuple[CauseRule, ...] = (
    CauseRule("target_down", (_c("target_up", "==", 0),),
              "{down_targets} does not answer its metrics page: the engine is down or unreachable."),
    CauseRule("engine_errors", (_c("target_up", "==", 1), _c("error_ratio", ">=", "error_ratio")),
              "the engine answers but fails {error_ratio} of its requests itself."),
    CauseRule("kv_cache_pressure", (_c("kv_cache", ">=", "kv_cache_ratio"),
                                    _c("preemptions", ">", "preemptions_per_second")),
              "the KV cache is {kv_cache} full and the engine preempts {preemptions} requests/s to make room."),
    CauseRule("queue_saturation", (_c("waiting", ">=", "queue_waiting"), _c("gpu_utilization", ">=", "gpu_busy_ratio")),
              "{waiting} requests wait while the GPUs are {gpu_utilization} busy: more load than capacity."),
    CauseRule("queue_saturation", (_c("waiting", ">=", "queue_waiting"), _c("gpu_readings", "==", 0),
                                   _c("running", ">", 0)),
              "{waiting} requests wait behind {running} running (no GPU readings for it): more load than capacity."),
    CauseRule("gpu_memory", (_c("gpu_memory", ">=", "gpu_memory_ratio"),),
              "GPU memory is {gpu_memory} used on {gpus}: out-of-memory risk."),
    CauseRule("gpu_throttling", (_c("gpu_throttled", ">", 0),),
              "the clocks of {throttled_gpus} are held back ({throttle_reasons}): the GPUs run slower than they can."),
    CauseRule("traffic_drop", (_c("throughput_baseline", "<", "throughput_baseline_ratio"), _c("waiting", "==", 0)),
              "throughput is at {throughput_baseline} of its baseline with nobody waiting: less traffic, "
              "not a slower engine."),
)


@dataclass(frozen=True)
class Signals:
    values: dict[str, float]
    texts: dict[str, str]


def _pct(ratio: float) -> str:
    return f"{ratio * 100:.4g} %"


def signals(context: Context, settings: CauseSettings) -> Signals:
    """The context reduced to the numbers the table compares (absent when no fact gives them)."""
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
    worst("error_ratio", [t.request_error_ratio for t in up_targets if t.request_error_ratio is not None], max, _pct)
    worst("kv_cache", [t.kv_cache_usage_ratio for t in up_targets if t.kv_cache_usage_ratio is not None], max, _pct)
    worst("preemptions", [t.preemptions_per_second for t in up_targets if t.preemptions_per_second is not None],
          max, lambda v: f"{v:.4g}")
    worst("waiting", [t.waiting for t in up_targets if t.waiting is not None], sum, lambda v: f"{v:g}")
    worst("running", [t.running for t in up_targets if t.running is not None], sum, lambda v: f"{v:g}")
    worst("throughput_baseline", [t.throughput_baseline_ratio for t in up_targets
                                  if t.throughput_baseline_ratio is not None], min, _pct)
    up_gpus = [g for g in context.gpus if g.up]
    values["gpu_readings"] = float(len(up_gpus))
    worst("gpu_utilization", [g.utilization_ratio for g in up_gpus if g.utilization_ratio is not None], max, _pct)
    worst("gpu_memory", [g.memory_used_ratio for g in up_gpus if g.memory_used_ratio is not None], max, _pct)
    reporting = [g for g in up_gpus if g.clock_events is not None]
    if reporting:
        limiting = set(settings.throttle_reasons)
        throttled = [g for g in reporting if limiting & set(g.clock_events or ())]
        values["gpu_throttled"] = float(len(throttled))
        texts["throttled_gpus"] = ", ".join(f"GPU {g.node}/{g.gpu}" for g in throttled)
        reasons = {r for g in throttled for r in g.clock_events or () if r in limiting}
        texts["throttle_reasons"] = ", ".join(sorted(reasons))
    texts["gpus"] = ", ".join(f"GPU {g.node}/{g.gpu}" for g in up_gpus)
    return Signals(values, texts)


def _holds(condition: Condition, values: dict[str, float], settings: CauseSettings) -> bool:
    value = values.get(condition.signal)
    if value is None:
        return False
    threshold = condition.threshold
    limit = float(getattr(settings, threshold)) if isinstance(threshold, str) else threshold
    return OPS[condition.op](value, limit)


def probable_cause(context: Context, settings: CauseSettings, table: tuple[CauseRule, ...] = CAUSES) -> str:
    """`<id>: <one sentence>`, from the first rule of the table whose conditions all hold."""
    found = signals(context, settings)
    for rule in table:
        if all(_holds(c, found.values, settings) for c in rule.when):
            return f"{rule.id}: {rule.sentence.format_map(_Texts(found))}"
    checked = ", ".join(f"{name} {found.texts.get(name, f'{value:g}')}"
                        for name, value in found.values.items() if name != "gpu_readings")
    return f"unknown: nothing stands out in the facts checked ({checked or 'none available'})."


class _Texts(dict[str, str]):
    def __init__(self, found: Signals) -> None:
        super().__init__({name: f"{value:g}" for name, value in found.values.items()})
        self.update(found.texts)

    def __missing__(self, key: str) -> str:
        return "?"
