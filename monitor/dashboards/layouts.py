"""The five dashboards as data: which metric each panel shows and how it is selected.

Selectors use the template variables: `$target`/`$model`/`$node`/`$gpu` are regexes (All is
`.*`), `$window` is one of the monitor's windows. Fleet-wide service series are the ones without
a `target` label (`target=""`), as the monitor and the generated recording rules export them.
"""

from __future__ import annotations

import dataclasses

from monitor.dashboards.spec import DashboardSpec, PanelSpec, Query, Row, Variable
from monitor.history.slope import quantity
from monitor.rulefiles.trends import Builder

SVC = 'target=~"$target",target!="",model=~"$model",window="$window"'
FLEET = 'target="",model=~"$model",window="$window"'
GPU = 'node=~"$node",gpu=~"$gpu"'
MODEL = 'model=~"$model"'

TARGET = Variable("target", "inference_target_up", "target")
MODEL_VAR = Variable("model", "inference_requests_per_second", "model", 'target=~"$target"')
# On a dashboard without a `target` variable: Grafana would leave `$target` as text, matching nothing.
FLEET_MODEL_VAR = Variable("model", "inference_requests_per_second", "model")
WINDOW = Variable("window", "inference_requests_per_second", "window", include_all=False)
NODE = Variable("node", "inference_gpu_up", "node")
GPU_VAR = Variable("gpu", "inference_gpu_up", "gpu", 'node=~"$node"')
QUALITY_MODEL = Variable("model", "inference_quality_score_mean", "model")

UID_PREFIX = "infermon-"


def _svc(metric: str, title: str, legend: str = "{{target}} {{model}}", **kw: object) -> PanelSpec:
    return PanelSpec(title, metric, (Query(f"{metric}{{{SVC}}}", legend),), **kw)  # type: ignore[arg-type]


def _baselines(stem: str, title: str) -> PanelSpec:
    """A ratio over the trailing baseline window, and the window's ratio over that one (the alert's)."""
    return PanelSpec(title, f"{stem}_baseline_ratio", (  # coloured at the alert's line on the first
        Query(f"{stem}_baseline_ratio{{{SVC}}}", "window / baseline {{target}} {{model}}"),
        Query(f"{stem}_ratio_baseline{{{SVC}}}", "baseline {{target}} {{model}}")))


def _quantiles(metric: str, title: str, objective: str | None = None) -> PanelSpec:
    queries = [Query(f'{metric}{{{SVC},quantile=~"0.5|0.99"}}', "P{{quantile}} {{target}}")]
    if objective:  # the configured real-time objective, as a line
        queries.append(Query(f'inference_slo_objective_seconds{{objective="{objective}"}}', f"objective ({objective})"))
    return PanelSpec(title, metric, tuple(queries))


def _gpu(metric: str, title: str, **kw: object) -> PanelSpec:
    return PanelSpec(title, metric, (Query(f"{metric}{{{GPU}}}", "{{node}} GPU {{gpu}}"),), **kw)  # type: ignore[arg-type]


def _model(metric: str, title: str, kind: str = "stat", **kw: object) -> PanelSpec:
    return PanelSpec(title, metric, (Query(f"{metric}{{{MODEL}}}", "{{model}}"),), kind=kind, **kw)  # type: ignore[arg-type]


def _plain(metric: str, title: str, expr: str | None = None, legend: str = "", **kw: object) -> PanelSpec:
    return PanelSpec(title, metric, (Query(expr or metric, legend),), **kw)  # type: ignore[arg-type]


OVERVIEW = DashboardSpec(
    uid=f"{UID_PREFIX}overview", title="Inference monitor / Overview",
    description="The four layers at a glance: GPUs and spend, latency against the objectives, errors, quality, alerts.",
    variables=(FLEET_MODEL_VAR, WINDOW),
    rows=(
        Row("Fleet", (
            _plain("inference_gpu_utilization_ratio", "Fleet GPU utilization",
                   "avg(inference_gpu_utilization_ratio)", "fleet", kind="stat", width=4),
            _plain("inference_cost_usd_per_hour", "Spend rate ($/h)", 'inference_cost_usd_per_hour{target="",model=""}',
                   "fleet", kind="stat", width=4),
            _plain("inference_cost_today_usd", "Spend today", kind="stat", width=4),
            _plain("inference_cost_budget_used_ratio", "Daily budget used", kind="stat", width=4),
            _model("inference_quality_score_mean", "Today's quality score (1-5)", width=4),
            _plain("inference_monitor_alerts_firing", "Alerts firing (embedded evaluator)",
                   "sum(inference_monitor_alerts_firing)", "firing", kind="stat", width=4, thresholds=False),
        )),
        Row("Service", (
            PanelSpec("P99 time to first token", "inference_ttft_seconds", (
                Query(f'inference_ttft_seconds{{{FLEET},quantile="0.99"}}', "P99 {{model}}"),
                Query('inference_slo_objective_seconds{objective="ttft"}', "objective (ttft)"))),
            PanelSpec("P99 time per output token", "inference_tpot_seconds", (
                Query(f'inference_tpot_seconds{{{FLEET},quantile="0.99"}}', "P99 {{model}}"),
                Query('inference_slo_objective_seconds{objective="tpot"}', "objective (tpot)"))),
            _plain("inference_request_error_ratio", "Error ratio", f"inference_request_error_ratio{{{FLEET}}}",
                   "{{model}}"),
        )),
        Row("The monitor itself", (
            _plain("inference_monitor_collector_success", "Collectors succeeding", "inference_monitor_collector_success",
                   "{{collector}} {{target}}", unit="bool"),
            _plain("inference_monitor_outbox_oldest_pending_seconds", "Oldest undelivered notification",
                   "inference_monitor_outbox_oldest_pending_seconds", "{{receiver}}"),
            _plain("inference_monitor_notifications_total", "Notifications sent",
                   "sum by (receiver, outcome) (rate(inference_monitor_notifications_total[$__rate_interval]))",
                   "{{receiver}} {{outcome}}", unit="ops"),
        )),
    ),
)

INFRASTRUCTURE = DashboardSpec(
    uid=f"{UID_PREFIX}infrastructure", title="Inference monitor / Infrastructure",
    description="GPUs per node: utilization, memory, temperature, power, clocks and throttling (NVML, dcgm-exporter or a replay).",
    variables=(NODE, GPU_VAR),
    rows=(
        Row("Health", (
            _gpu("inference_gpu_up", "GPU up", kind="stat", width=6),
            _gpu("inference_gpu_utilization_ratio", "Utilization", width=9),
            _gpu("inference_gpu_kernel_active_ratio", "Kernel active (NVML utilization.gpu)", width=9, thresholds=False),
        )),
        Row("Memory", (
            _gpu("inference_gpu_memory_used_ratio", "Memory used"),
            _gpu("inference_gpu_memory_used_bytes", "Memory used (bytes)"),
            _gpu("inference_gpu_memory_total_bytes", "Memory total", kind="stat"),
            PanelSpec("MIG instance memory used", "inference_gpu_mig_memory_used_ratio",
                      (Query(f"inference_gpu_mig_memory_used_ratio{{{GPU}}}", "{{node}} GPU {{gpu}} {{gpu_instance}} {{profile}}"),)),
            PanelSpec("Uncorrected ECC errors in the range", "inference_gpu_ecc_uncorrected_errors_total",
                      (Query(f"increase(inference_gpu_ecc_uncorrected_errors_total{{{GPU}}}[$__range])", "{{node}} GPU {{gpu}}"),),
                      unit="none", description="Double-bit volatile ECC errors counted over the dashboard's time range."),
        )),
        Row("Thermals and power", (
            _gpu("inference_gpu_temperature_celsius", "Temperature"),
            _gpu("inference_gpu_power_used_ratio", "Power of the enforced limit"),
            _gpu("inference_gpu_power_watts", "Power draw"),
            PanelSpec("Energy rate", "inference_gpu_energy_joules_total",
                      (Query(f"rate(inference_gpu_energy_joules_total{{{GPU}}}[$__rate_interval])", "{{node}} GPU {{gpu}}"),),
                      unit="watt", description="Energy counter's rate: the mean power over the interval."),
            _gpu("inference_gpu_sm_clock_hertz", "SM clock"),
            PanelSpec("Clock events (throttle reasons)", "inference_gpu_clock_event_active",
                      (Query(f"inference_gpu_clock_event_active{{{GPU}}}", "{{node}} GPU {{gpu}} {{reason}}"),), unit="bool"),
        )),
        # What takes a GPU out of service (alerts/infra.yml, group infra-health; docs/runbooks/infra.md).
        Row("GPU errors", (
            PanelSpec("XIDs in the last hour", "inference_gpu_xid_events",
                      (Query(f"inference_gpu_xid_events{{{GPU}}} > 0", "{{node}} GPU {{gpu}} XID {{xid}}"),),
                      unit="none",
                      description="XIDs counted over the last hour, by XID: 79 fell off the bus, 48/95 uncorrectable "
                                  "ECC, 94 contained ECC, 74 NVLink, 63/64 memory repair recorded/failed."),
            PanelSpec("Row remap pending / failed", "inference_gpu_row_remap_pending",
                      (Query(f"inference_gpu_row_remap_pending{{{GPU}}}", "{{node}} GPU {{gpu}} pending"),
                       Query(f"inference_gpu_row_remap_failed{{{GPU}}}", "{{node}} GPU {{gpu}} failed")),
                      unit="bool",
                      description="Pending: drain and reset when convenient. Failed: out of service, RMA."),
            PanelSpec("Error counters' increase (10m)", "inference_gpu_errors_increase",
                      (Query(f"inference_gpu_errors_increase{{{GPU}}}", "{{node}} GPU {{gpu}} {{kind}}"),),
                      unit="none"),
            _gpu("inference_gpu_retired_pages", "Retired pages (Volta and older)", kind="stat"),
        )),
    ),
)

_TTFT_P99 = 'inference_ttft_seconds{quantile="0.99",window="5m",target=~"$target",model=~"$model"}'
# The TTFT creep rule's growth a day (percent a day), its own PromQL over the dashboard's targets and models.
_TTFT_GROWTH = Builder(dataclasses.replace(
    quantity("TTFTP99"), selector='inference_ttft_seconds{quantile="0.99",window="5m",target=~"$target",target!="",'
                                 'model=~"$model"}'), "up").per_day_shown()

SERVICE = DashboardSpec(
    uid=f"{UID_PREFIX}service", title="Inference monitor / Service",
    description="Serving engines per target and model: traffic, errors, latency against the objectives, queue and KV cache.",
    variables=(TARGET, MODEL_VAR, WINDOW),
    rows=(
        Row("Traffic and errors", (
            _plain("inference_target_up", "Target up", 'inference_target_up{target=~"$target"}', "{{target}}",
                   kind="stat"),
            _svc("inference_requests_per_second", "Requests"),
            _svc("inference_request_error_ratio", "Error ratio"),
            _svc("inference_aborted_requests_per_second", "Aborted by the client"),
            _svc("inference_generation_tokens_per_second", "Generated tokens"),
            _svc("inference_prompt_tokens_per_second", "Prompt tokens"),
            _svc("inference_throughput_baseline_ratio", "Throughput against its baseline"),
        )),
        Row("Latency", (
            _quantiles("inference_ttft_seconds", "Time to first token", "ttft"),
            _quantiles("inference_tpot_seconds", "Time per output token", "tpot"),
            _svc("inference_slo_attainment_ratio", "Requests within the objectives", "{{objective}} {{target}}"),
            _quantiles("inference_e2e_latency_seconds", "End-to-end latency"),
            _quantiles("inference_queue_time_seconds", "Queue time"),
            # The trend rules' comparison (alerts/trend.yml): the last 6 hours against the same hours before.
            PanelSpec("P99 TTFT week over week", "inference_ttft_seconds",
                      (Query(f"avg_over_time({_TTFT_P99}[6h]) / avg_over_time({_TTFT_P99}[6h] offset 1w)",
                             "vs 1 week {{target}} {{model}}"),
                       Query(f"avg_over_time({_TTFT_P99}[6h]) / avg_over_time({_TTFT_P99}[6h] offset 2w)",
                             "vs 2 weeks {{target}} {{model}}")),
                      unit="percentunit", thresholds=False,
                      description="P99 TTFT over the last 6 hours against the same hours one and two weeks before "
                                  "(1 = unchanged). The trend rules ticket a creep above 108 % of both."),
            PanelSpec("P99 TTFT growth a day", "inference_ttft_seconds",
                      (Query(_TTFT_GROWTH, "{{target}} {{model}}"),), unit="percent", thresholds=False,
                      description="The TTFT creep rule's value (alerts/trend.yml): the larger of the week-over-week "
                                  "growth taken to a day and the growth over the last day and a half, in percent a "
                                  "day. It tickets where the level is also above both earlier weeks."),
            _quantiles("inference_prefill_time_seconds", "Prefill time"),
            _quantiles("inference_decode_time_seconds", "Decode time"),
        )),
        Row("Engine", (
            _plain("inference_requests_running", "Running", 'inference_requests_running{target=~"$target",model=~"$model"}',
                   "{{target}}"),
            _plain("inference_requests_waiting", "Waiting", 'inference_requests_waiting{target=~"$target",model=~"$model"}',
                   "{{target}}"),
            _plain("inference_kv_cache_usage_ratio", "KV cache usage",
                   'inference_kv_cache_usage_ratio{target=~"$target",model=~"$model"}', "{{target}}"),
            _svc("inference_preemptions_per_second", "Preemptions"),
            _svc("inference_prefix_cache_hit_ratio", "Prefix-cache hit ratio (prompt tokens)"),
            _baselines("inference_prefix_cache_hit", "Prefix-cache hit ratio: its baseline, and the window against it"),
            _svc("inference_spec_decode_acceptance_ratio", "Speculative decoding: draft tokens accepted"),
            _baselines("inference_spec_decode_acceptance", "Draft acceptance: its baseline, and the window against it"),
            _svc("inference_spec_decode_position_acceptance_ratio", "Draft tokens accepted by position (vLLM)",
                 "position {{position}} {{target}}"),
            _svc("inference_spec_decode_acceptance_length", "Speculative decoding: tokens per target step"),
            _svc("inference_generation_seconds_per_token", "Mean time per generated token (llama.cpp)"),
            _svc("inference_prompt_seconds_per_token", "Mean prompt time per token (llama.cpp)"),
            _plain("inference_requests_waiting_by_reason", "Why requests wait (vLLM)",
                   'inference_requests_waiting_by_reason{target=~"$target",model=~"$model"}', "{{reason}} {{target}}"),
            _plain("inference_engines_sleeping", "Engines asleep (vLLM sleep mode)",
                   'inference_engines_sleeping{target=~"$target",model=~"$model"}', "{{target}}"),
            _plain("inference_engine_sleep_state", "Engines per sleep state",
                   'inference_engine_sleep_state{target=~"$target",model=~"$model"}', "{{state}} {{target}}"),
            _plain("inference_lora_adapters", "LoRA adapters running / waiting",
                   'inference_lora_adapters{target=~"$target"}', "{{state}} {{target}}"),
            _plain("inference_lora_adapters_max", "LoRA adapter slots (--max-loras)",
                   'inference_lora_adapters_max{target=~"$target"}', "{{target}}"),
            _plain("inference_spec_decode_engine_acceptance_ratio", "Speculative decoding as the engine reports it (SGLang)",
                   'inference_spec_decode_engine_acceptance_ratio{target=~"$target",model=~"$model"}', "{{target}}"),
            _plain("inference_spec_decode_engine_acceptance_length", "Accepted length as the engine reports it (SGLang)",
                   'inference_spec_decode_engine_acceptance_length{target=~"$target",model=~"$model"}', "{{target}}"),
        )),
        Row("Data-parallel ranks (one hot rank is what the target's sums hide)", (
            _plain("inference_rank_imbalance_ratio", "Busiest rank over the mean load",
                   'inference_rank_imbalance_ratio{target=~"$target",model=~"$model"}', "{{target}}"),
            _plain("inference_rank_requests_running", "Running per rank",
                   'inference_rank_requests_running{target=~"$target",model=~"$model"}', "rank {{rank}} {{target}}"),
            _plain("inference_rank_requests_waiting", "Waiting per rank",
                   'inference_rank_requests_waiting{target=~"$target",model=~"$model"}', "rank {{rank}} {{target}}"),
            _plain("inference_rank_kv_cache_usage_ratio", "KV cache usage per rank",
                   'inference_rank_kv_cache_usage_ratio{target=~"$target",model=~"$model"}', "rank {{rank}} {{target}}"),
        )),
        Row("Canary (a synthetic user through the API)", (
            _plain("inference_canary_up", "Canary up", 'inference_canary_up{model=~"$model"}', "{{probe}}", kind="stat"),
            _plain("inference_canary_ttft_seconds", "Canary time to first token",
                   'inference_canary_ttft_seconds{model=~"$model"}', "{{probe}}"),
            _plain("inference_canary_ttft_gap_seconds", "Canary TTFT minus the engine's P50",
                   'inference_canary_ttft_gap_seconds{model=~"$model"}', "{{probe}} {{target}}"),
        )),
    ),
)

QUALITY = DashboardSpec(
    uid=f"{UID_PREFIX}quality", title="Inference monitor / Quality",
    description="The daily LLM-judge run per model: score, refusals, hallucinations, output-length drift. "
                "The day's report is linked at the top.",
    variables=(QUALITY_MODEL,),
    rows=(
        Row("Judge", (
            _model("inference_quality_score_mean", "Mean judge score (1-5)", width=6),
            _model("inference_quality_score_baseline_delta", "Score against the baseline days", width=6),
            _model("inference_quality_samples", "Samples judged", width=6),
            _model("inference_quality_judge_errors", "Judge errors", width=6),
        )),
        Row("Answers", (
            _model("inference_quality_refusal_ratio", "Refusal ratio", kind="timeseries"),
            _model("inference_quality_refusal_baseline_ratio", "Refusals against the baseline days", kind="timeseries"),
            _model("inference_quality_hallucination_ratio", "Hallucination ratio", kind="timeseries"),
        )),
        Row("Output length", (
            PanelSpec("Output tokens (P50, P95)", "inference_quality_output_tokens",
                      (Query(f"inference_quality_output_tokens{{{MODEL}}}", "P{{quantile}} {{model}}"),), unit="none"),
            _model("inference_quality_output_length_psi", "Length PSI against the baseline", kind="timeseries"),
            _model("inference_quality_output_length_mean_change_ratio", "Mean length change", kind="timeseries"),
        )),
        Row("Runs", (
            _model("inference_quality_last_run_age_seconds", "Since the last run"),
            _model("inference_quality_last_run_timestamp_seconds", "Last run finished", thresholds=False),
            _plain("inference_quality_judge_cost_usd_total", "Judge cost of the stored runs", kind="stat"),
        )),
    ),
)

COST = DashboardSpec(
    uid=f"{UID_PREFIX}cost", title="Inference monitor / Cost",
    description="GPU spend: rate, idle share, $ per million tokens, today's spend against the budget.",
    variables=(FLEET_MODEL_VAR, WINDOW),
    rows=(
        Row("Spend", (
            _plain("inference_cost_today_usd", "Spend today", kind="stat", width=6),
            _plain("inference_cost_budget_used_ratio", "Daily budget used", kind="stat", width=6),
            _plain("inference_cost_daily_budget_usd", "Daily budget", kind="stat", width=6),
            _plain("inference_cost_usd_total", "Spend over the time range",
                   'increase(inference_cost_usd_total{target="",model=""}[$__range])', "fleet", kind="stat", width=6),
            _plain("inference_cost_usd_per_hour", "Spend rate per model ($/h)",
                   'inference_cost_usd_per_hour{model=~"$model",model!=""}', "{{model}}"),
            _plain("inference_cost_usd_per_hour", "Spend rate per target ($/h)",
                   'inference_cost_usd_per_hour{target!=""}', "{{target}}"),
            _plain("inference_cost_idle_usd_per_hour", "Idle spend ($/h)", legend="idle"),
        )),
        Row("Efficiency", (
            _plain("inference_cost_idle_ratio", "Idle share of the spend"),
            _plain("inference_cost_usd_per_million_tokens", "$ per million tokens",
                   f'inference_cost_usd_per_million_tokens{{{MODEL},window="$window"}}', "{{model}} {{tokens}}"),
            _plain("inference_cost_per_token_baseline_ratio", "$/token against its baseline",
                   f'inference_cost_per_token_baseline_ratio{{{MODEL},window="$window"}}', "{{model}}",
                   unit="none"),
            _plain("inference_cost_expensive_request_ratio", "Unusually long requests",
                   f'inference_cost_expensive_request_ratio{{{MODEL},window="$window"}}', "{{model}} {{tokens}}"),
        )),
        Row("Prices", (
            _plain("inference_cost_price_known", "GPUs without a price", "count(inference_cost_price_known == 0) or vector(0)",
                   "unpriced", kind="stat", thresholds=False),
            _plain("inference_cost_gpu_price_usd_per_hour", "Price per GPU ($/h)",
                   "inference_cost_gpu_price_usd_per_hour", "{{node}} GPU {{gpu}} {{model}}"),
        )),
    ),
)

DASHBOARDS = (OVERVIEW, INFRASTRUCTURE, SERVICE, QUALITY, COST)
