"""Crafted views for the alert-context tests, and the check that a `context` annotation holds
exactly the values a /metrics page held (each line parsed back and compared with its series)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.alerting.context import Views
from monitor.infra.reading import CLOCK_EVENT_REASONS, GpuIdentity, GpuReading, GpuState, InfraView
from monitor.quality.layer import ModelResult, QualityView
from monitor.quality.summary import QualitySummary
from monitor.service.derive import Objectives, Window, WindowStats
from monitor.service.view import ServiceView, TargetView
from monitor.topology import TopologyMap

MODEL = "llama"
NODE = "node-1"


def target(name: str = "vllm-a", up: bool = True, running: float = 4, waiting: float = 0, kv: float = 0.3,
           last_minute: dict[str, Any] | None = None, **stats: Any) -> TargetView:
    """The same numbers over 1m and 5m, unless `last_minute` says what differs in the last minute."""
    values = {"requests_per_second": 5.0, "error_ratio": 0.0, "preemptions_per_second": 0.0,
              "throughput_baseline_ratio": 1.0, **stats}
    if not up:
        return TargetView(name, False, None, None)
    return TargetView(name, True, "vllm", "v1",
                      gauges={"running": {MODEL: running}, "waiting": {MODEL: waiting}, "kv_cache": {MODEL: kv}},
                      stats={(MODEL, "1m"): WindowStats(**{**values, **(last_minute or {})}),
                             (MODEL, "5m"): WindowStats(**values)})


def ranked(view: TargetView, running: dict[str, float] | None = None, waiting: dict[str, float] | None = None,
           sleep: dict[str, float] | None = None) -> TargetView:
    """The target with per-rank gauges and sleep states, as a vLLM 0.33 page gives them."""
    if running is not None:
        view.labelled["rank_running"] = {MODEL: running}
    if waiting is not None:
        view.labelled["rank_waiting"] = {MODEL: waiting}
    if sleep is not None:
        view.labelled["sleep_state"] = {MODEL: sleep}
    return view


def gpu(index: str = "0", up: bool = True, util: float = 0.5, mem: float = 0.5, reasons: tuple[str, ...] = (),
        temp: float = 50.0) -> GpuState:
    if not up:
        return GpuState(NODE, index, "nvml", False, GpuIdentity(int(index), "GPU-x", "NVIDIA H200", "580"),
                        error="GPU is lost")
    mask = sum(CLOCK_EVENT_REASONS[r] for r in reasons)
    total = 150e9
    reading = GpuReading(kernel_active_ratio=util, memory_used_bytes=mem * total, memory_total_bytes=total,
                         temperature_celsius=temp, power_watts=500.0, power_limit_watts=700.0, clock_event_mask=mask)
    return GpuState(NODE, index, "nvml", True, GpuIdentity(int(index), "GPU-x", "NVIDIA H200", "580"), reading)


def views(targets: list[TargetView], gpus: list[GpuState], gpus_of: dict[str, list[str]] | None = None,
          quality: QualityView | None = None) -> Views:
    mapping = gpus_of if gpus_of is not None else {t.name: [g.gpu for g in gpus] for t in targets}
    by_target = {name: tuple((NODE, i) for i in indices) for name, indices in mapping.items()}
    by_gpu: dict[tuple[str, str], tuple[str, ...]] = {}
    for name, keys in by_target.items():
        for key in keys:
            by_gpu[key] = (*by_gpu.get(key, ()), name)
    service = ServiceView(0.0, [Window("1m", 60.0), Window("5m", 300.0)], Objectives(),
                          targets={t.name: t for t in targets})
    return Views(service, InfraView(0.0, tuple(gpus)), TopologyMap(by_target, by_gpu), quality)


def quality_view(score: float = 4.2, refusal: float = 0.02, psi: float = 0.04) -> QualityView:
    summary = {"score_mean": score, "refusal_ratio": refusal, "psi": psi, "output_length_mean_change_ratio": -0.05}
    return QualityView({MODEL: ModelResult("2026-11-29", 1.0, QualitySummary.from_json(summary))}, loaded=True)


# Each context line's label -> (metric, unit): how the line is checked against /metrics.
_TARGET_FACTS = {
    "requests running": ("inference_requests_running", 1.0, False),
    "requests waiting": ("inference_requests_waiting", 1.0, False),
    "KV-cache usage": ("inference_kv_cache_usage_ratio", 100.0, False),
    "preemptions/s": ("inference_preemptions_per_second", 1.0, True),
    "throughput vs. baseline": ("inference_throughput_baseline_ratio", 100.0, True),
    "error ratio": ("inference_request_error_ratio", 100.0, True),
    "requests/s": ("inference_requests_per_second", 1.0, True),
    "busiest rank vs. mean": ("inference_rank_imbalance_ratio", 1.0, False),
    "engines asleep": ("inference_engines_sleeping", 1.0, False),
    "prefix-cache hits": ("inference_prefix_cache_hit_ratio", 100.0, True),
    "prefix-cache hits over the baseline": ("inference_prefix_cache_hit_ratio_baseline", 100.0, True),
}
_GPU_FACTS = {
    "utilization": ("inference_gpu_utilization_ratio", 100.0),
    "memory used": ("inference_gpu_memory_used_ratio", 100.0),
    "temperature": ("inference_gpu_temperature_celsius", 1.0),
}
_QUALITY_FACTS = {
    "judge score": ("inference_quality_score_mean", 1.0),
    "refusal ratio": ("inference_quality_refusal_ratio", 100.0),
    "output length PSI": ("inference_quality_output_length_psi", 1.0),
    "output length mean change": ("inference_quality_output_length_mean_change_ratio", 100.0),
    "usable verdicts": ("inference_quality_samples", 1.0),
    "judge errors": ("inference_quality_judge_errors", 1.0),
    "suspect verdicts": ("inference_quality_judge_suspect_verdicts", 1.0),
}
_TARGET_LINE = re.compile(r"^(\S+) model=(\S+)(?: window=(\S+))? (.+): (.+)$")
_GPU_LINE = re.compile(r"^GPU (\S+)/(\S+) (.+): (.+)$")
_QUALITY_LINE = re.compile(r"^quality (\S+) \(run \S+\) (.+): (.+)$")


def page(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _lookup(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in metrics, f"/metrics has no {name}{labels}"
    return metrics[key]


def _number(text: str) -> float:
    return float(text.split()[0])


def assert_context_matches(context: str, metrics_text: str) -> int:
    """Every line of `context` equals its /metrics series (to the four digits written); returns
    how many values were compared. A line this check does not know fails it."""
    metrics = page(metrics_text)
    compared = 0
    for line in context.splitlines():
        if m := _GPU_LINE.match(line):
            node, index, label, text = m.groups()
            compared += _check_gpu(metrics, node, index, label, text)
        elif (m := _QUALITY_LINE.match(line)) and m.group(2) == "failed":
            assert _lookup(metrics, "inference_quality_run_failed", model=m.group(1)) == 1.0, line
            compared += 1
        elif m := _QUALITY_LINE.match(line):
            model, label, text = m.groups()
            metric, unit = _QUALITY_FACTS[label]
            assert _number(text) == pytest.approx(_lookup(metrics, metric, model=model) * unit, rel=1e-3), line
            compared += 1
        elif m := _TARGET_LINE.match(line):
            name, model, window, label, text = m.groups()
            metric, unit, windowed = _TARGET_FACTS[label]
            labels = {"target": name, "model": model, **({"window": window} if windowed else {})}
            assert _number(text) == pytest.approx(_lookup(metrics, metric, **labels) * unit, rel=1e-3), line
            compared += 1
        elif line.endswith(" up: no (the metrics page does not answer)"):
            assert _lookup(metrics, "inference_target_up", target=line.split()[0]) == 0.0
            compared += 1
        else:
            raise AssertionError(f"context line not understood: {line!r}")
    return compared


def _check_gpu(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float], node: str, index: str, label: str,
               text: str) -> int:
    where = {"node": node, "gpu": index}
    if label == "up":
        assert text.startswith("no") and _lookup(metrics, "inference_gpu_up", **where) == 0.0
        return 1
    if label == "serves":
        return 0
    if label == "readings":  # no source shows it: /metrics has no series of it either
        assert not any(name.startswith("inference_gpu_") and {("node", node), ("gpu", index)} <= labels
                       for name, labels in metrics)
        return 1
    if label == "clock events":
        active = {dict(labels)["reason"] for (name, labels), v in metrics.items()
                  if name == "inference_gpu_clock_event_active" and v == 1.0
                  and {("node", node), ("gpu", index)} <= labels}
        assert (set(text.split(", ")) if text != "none" else set()) == active
        return 1
    if label == "power":
        watts = _number(text)
        assert watts == pytest.approx(_lookup(metrics, "inference_gpu_power_watts", **where), rel=1e-3)
        limit = re.search(r"of (\S+) W", text)
        if limit:
            assert float(limit.group(1)) == pytest.approx(
                _lookup(metrics, "inference_gpu_power_limit_watts", **where), rel=1e-3)
        return 1
    metric, unit = _GPU_FACTS[label]
    assert _number(text) == pytest.approx(_lookup(metrics, metric, **where) * unit, rel=1e-3), label
    return 1
