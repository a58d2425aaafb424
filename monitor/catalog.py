"""Every metric the monitor exports, as data: name, type, labels, help.

Renderers create families only through `family()`, so a name that is not in the catalog cannot
be emitted, and a test compares what a full scenario emits with this table.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.core import Metric


@dataclass(frozen=True)
class MetricDef:
    name: str
    type: str  # gauge | counter | summary | info-style gauge
    labels: tuple[str, ...]
    help: str
    layer: str


_SVC = ("target", "model", "window")
_SVC_Q = (*_SVC, "quantile")

CATALOG: dict[str, MetricDef] = {
    d.name: d
    for d in [
        # service: per {target, model, window}, and fleet-wide per {model, window} (no target)
        MetricDef("inference_target_up", "gauge", ("target",), "1 if the last scrape of the engine target succeeded.", "service"),
        MetricDef("inference_target_info", "gauge", ("target", "engine", "generation"), "Engine detected on the target's page.", "service"),
        MetricDef("inference_requests_per_second", "gauge", _SVC, "Finished requests per second (rate over the window).", "service"),
        MetricDef("inference_request_error_ratio", "gauge", _SVC, "Share of finished requests that failed (engine errors or HTTP 5xx, the worse of the two); aborts are not errors.", "service"),
        MetricDef("inference_prompt_tokens_per_second", "gauge", _SVC, "Prompt (prefill) tokens per second.", "service"),
        MetricDef("inference_generation_tokens_per_second", "gauge", _SVC, "Generated tokens per second.", "service"),
        MetricDef("inference_preemptions_per_second", "gauge", _SVC, "Engine preemptions per second (KV-cache pressure).", "service"),
        MetricDef("inference_throughput_baseline_ratio", "gauge", _SVC, "Generation tokens/s over the window divided by its trailing baseline.", "service"),
        MetricDef("inference_ttft_seconds", "summary", _SVC_Q, "Time to first token, quantiles over the window (histogram_quantile of the engine's buckets).", "service"),
        MetricDef("inference_tpot_seconds", "summary", _SVC_Q, "Time per output token (per request; inter-token latency where the engine has only that).", "service"),
        MetricDef("inference_e2e_latency_seconds", "summary", _SVC_Q, "End-to-end request latency, quantiles over the window.", "service"),
        MetricDef("inference_queue_time_seconds", "summary", _SVC_Q, "Time requests waited in the engine queue, quantiles over the window.", "service"),
        MetricDef("inference_slo_attainment_ratio", "gauge", (*_SVC, "objective"), "Share of requests within the objective (ttft or tpot), interpolated inside buckets.", "service"),
        MetricDef("inference_slo_objective_seconds", "gauge", ("objective",), "The configured real-time objectives.", "service"),
        MetricDef("inference_requests_running", "gauge", ("target", "model"), "Requests in the engine's running batch.", "service"),
        MetricDef("inference_requests_waiting", "gauge", ("target", "model"), "Requests waiting in the engine's queue.", "service"),
        MetricDef("inference_kv_cache_usage_ratio", "gauge", ("target", "model"), "KV-cache usage 0-1 (the fullest engine of the model on the target).", "service"),
        # self
        MetricDef("inference_monitor_collector_success", "gauge", ("collector", "target"), "1 if the collector's last run succeeded.", "self"),
        MetricDef("inference_monitor_collector_duration_seconds", "gauge", ("collector", "target"), "Duration of the collector's last run.", "self"),
        MetricDef("inference_monitor_last_success_timestamp_seconds", "gauge", ("collector", "target"), "Unix time of the collector's last successful run.", "self"),
    ]
}


def family(name: str) -> Metric:
    """A fresh, empty family for a catalogued metric (KeyError for one that is not catalogued)."""
    definition = CATALOG[name]
    if definition.type == "counter":
        # prometheus_client names a counter family without `_total` and adds it to samples.
        return Metric(name.removesuffix("_total"), definition.help, "counter")
    return Metric(name, definition.help, definition.type)
