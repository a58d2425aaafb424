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
_GPU = ("node", "gpu")
_MIG = (*_GPU, "gpu_instance", "profile")

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
        # infra: per {node, gpu}; the same names whether read through NVML, dcgm-exporter or a replayed trace
        MetricDef("inference_gpu_up", "gauge", _GPU, "1 if the GPU answered its last read; 0 when it timed out, hung, or fell off the bus (its other series then disappear).", "infra"),
        MetricDef("inference_gpu_info", "gauge", (*_GPU, "uuid", "model", "driver"), "GPU identity (UUID, model name, driver version); kept while the GPU is down.", "infra"),
        MetricDef("inference_gpu_utilization_ratio", "gauge", _GPU, "Preferred utilization 0-1: graphics-engine active ratio where the source has it (dcgm profiling), else the kernel-active ratio.", "infra"),
        MetricDef("inference_gpu_kernel_active_ratio", "gauge", _GPU, "Share of time any kernel ran (NVML utilization.gpu, DCGM_FI_DEV_GPU_UTIL); saturates at the slightest activity.", "infra"),
        MetricDef("inference_gpu_graphics_engine_active_ratio", "gauge", _GPU, "Share of time the graphics/compute engine was active (DCGM_FI_PROF_GR_ENGINE_ACTIVE); dcgm-exporter only.", "infra"),
        MetricDef("inference_gpu_memory_used_bytes", "gauge", _GPU, "GPU memory in use (driver-reserved memory excluded where the driver reports it apart).", "infra"),
        MetricDef("inference_gpu_memory_total_bytes", "gauge", _GPU, "GPU memory in total.", "infra"),
        MetricDef("inference_gpu_memory_reserved_bytes", "gauge", _GPU, "GPU memory reserved by the driver and firmware (NVML memory v2, DCGM FB_RESERVED).", "infra"),
        MetricDef("inference_gpu_memory_used_ratio", "gauge", _GPU, "Memory used divided by memory total.", "infra"),
        MetricDef("inference_gpu_temperature_celsius", "gauge", _GPU, "GPU die temperature.", "infra"),
        MetricDef("inference_gpu_power_watts", "gauge", _GPU, "Power draw.", "infra"),
        MetricDef("inference_gpu_power_limit_watts", "gauge", _GPU, "Enforced power limit.", "infra"),
        MetricDef("inference_gpu_energy_joules_total", "counter", _GPU, "Energy used since the driver loaded (NVML reads it every 30 s: the call takes milliseconds).", "infra"),
        MetricDef("inference_gpu_sm_clock_hertz", "gauge", _GPU, "Current SM clock.", "infra"),
        MetricDef("inference_gpu_clock_event_active", "gauge", (*_GPU, "reason"), "1 while the clock-event (throttle) reason holds clocks down: sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, hw_power_brake, ...", "infra"),
        MetricDef("inference_gpu_ecc_uncorrected_errors_total", "counter", _GPU, "Uncorrected (double-bit) volatile ECC errors since the driver loaded.", "infra"),
        MetricDef("inference_gpu_mig_memory_used_bytes", "gauge", _MIG, "Memory in use in a MIG GPU instance (instances have no utilization).", "infra"),
        MetricDef("inference_gpu_mig_memory_total_bytes", "gauge", _MIG, "Memory of a MIG GPU instance.", "infra"),
        MetricDef("inference_gpu_mig_memory_used_ratio", "gauge", _MIG, "Memory used divided by memory total, per MIG GPU instance.", "infra"),
        MetricDef("inference_gpu_workload_info", "gauge", (*_GPU, "gpu_instance", "pod", "namespace", "container"), "The Kubernetes pod using the GPU (or MIG instance), from dcgm-exporter's labels.", "infra"),
        # self
        MetricDef("inference_monitor_collector_success", "gauge", ("collector", "target"), "1 if the collector's last run succeeded.", "self"),
        MetricDef("inference_monitor_collector_duration_seconds", "gauge", ("collector", "target"), "Duration of the collector's last run.", "self"),
        MetricDef("inference_monitor_last_success_timestamp_seconds", "gauge", ("collector", "target"), "Unix time of the collector's last successful run.", "self"),
        MetricDef("inference_monitor_scrape_lag_seconds", "gauge", ("collector",), "How far behind schedule the collector's scrapes ran over the last interval (start after its slot plus the wait for the parse thread); near 0 while it keeps up.", "service"),
        MetricDef("inference_monitor_scrapes_skipped_total", "counter", ("collector",), "Scrapes not started at their slot because the target's previous scrape was still running or the loop fell behind by a whole interval.", "service"),
        MetricDef("inference_monitor_config_last_reload_successful", "gauge", (), "0 when the last configuration reload (SIGHUP) failed; the running configuration was kept.", "self"),
    ]
}


def family(name: str) -> Metric:
    """A fresh, empty family for a catalogued metric (KeyError for one that is not catalogued)."""
    definition = CATALOG[name]
    if definition.type == "counter":
        # prometheus_client names a counter family without `_total` and adds it to samples.
        return Metric(name.removesuffix("_total"), definition.help, "counter")
    return Metric(name, definition.help, definition.type)
