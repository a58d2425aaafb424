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
_CANARY = ("probe", "model")

CATALOG: dict[str, MetricDef] = {
    d.name: d
    for d in [
        # service: per {target, model, window}, and fleet-wide per {model, window} (no target)
        MetricDef("inference_target_up", "gauge", ("target",), "1 if the last scrape of the engine target succeeded.", "service"),
        MetricDef("inference_target_refused", "gauge", ("target",), "1 while the target's page is over one of its budgets (service.max_series_per_target, max_models_per_target, max_ingest_time): it is refused and reads down, and the other targets go on; /api/v1/status says which budget.", "service"),
        MetricDef("inference_target_stale", "gauge", ("target",), "1 if the monitor has not scraped the target for over two intervals because it fell behind (its scrapes ran late or were skipped): its numbers are withheld; the engine itself may be fine.", "service"),
        MetricDef("inference_target_engine_recognized", "gauge", ("target",), "1 if the target's page (scraped fine) matches an engine table; 0: it answers but its families are no known engine's (see /api/v1/status).", "service"),
        MetricDef("inference_target_info", "gauge", ("target", "engine", "generation", "version"), "Engine detected on the target's page.", "service"),  # version: its API's (service/version.py), once read
        MetricDef("inference_requests_per_second", "gauge", _SVC, "Finished requests per second (rate over the window).", "service"),
        MetricDef("inference_request_error_ratio", "gauge", _SVC, "Share of finished requests that failed (engine errors or HTTP 5xx, the worse of the two); aborts are not errors.", "service"),
        MetricDef("inference_prompt_tokens_per_second", "gauge", _SVC, "Prompt (prefill) tokens per second.", "service"),
        MetricDef("inference_generation_tokens_per_second", "gauge", _SVC, "Generated tokens per second.", "service"),
        MetricDef("inference_preemptions_per_second", "gauge", _SVC, "Engine preemptions per second (KV-cache pressure).", "service"),
        MetricDef("inference_aborted_requests_per_second", "gauge", _SVC, "Requests finished because the client cancelled or went away, per second (vLLM finished_reason=abort, SGLang num_aborted_requests); part of the requests, never errors.", "service"),
        MetricDef("inference_throughput_baseline_ratio", "gauge", _SVC, "Generation tokens/s over the window divided by its trailing baseline.", "service"),
        MetricDef("inference_prefix_cache_hit_ratio", "gauge", _SVC, "Share of prompt tokens found in the engine's prefix cache (vLLM prefix_cache_hits/queries, SGLang cached_tokens/prompt_tokens, llama.cpp cached/all prompt tokens).", "service"),
        MetricDef("inference_prompt_seconds_per_token", "gauge", _SVC, "Mean prompt-processing time per computed (not cached) prompt token, from the engine's busy-time counter (llama.cpp).", "service"),
        MetricDef("inference_generation_seconds_per_token", "gauge", _SVC, "Mean generation time per generated token, from the engine's busy-time counter (llama.cpp): its TPOT without quantiles.", "service"),
        MetricDef("inference_spec_decode_acceptance_ratio", "gauge", _SVC, "Speculative decoding: accepted draft tokens / proposed draft tokens over the window (vLLM, llama.cpp).", "service"),
        MetricDef("inference_spec_decode_acceptance_length", "gauge", _SVC, "Speculative decoding: mean tokens per target-model step, 1 + accepted draft tokens per verification step.", "service"),
        MetricDef("inference_spec_decode_position_acceptance_ratio", "gauge", (*_SVC, "position"), "Speculative decoding: accepted draft tokens at each position of the draft (0 = first) per draft, over the window (vLLM's accepted_tokens_per_pos): how far into a draft the target model still agrees.", "service"),
        MetricDef("inference_prefix_cache_hit_ratio_baseline", "gauge", _SVC, "The prefix-cache hit ratio over the trailing baseline window before the window (only where the history covers it).", "service"),
        MetricDef("inference_prefix_cache_hit_baseline_ratio", "gauge", _SVC, "The window's prefix-cache hit ratio divided by its baseline's: below 1 the cache finds fewer prompt tokens than it used to (longer prefills, higher TTFT).", "service"),
        MetricDef("inference_spec_decode_acceptance_ratio_baseline", "gauge", _SVC, "The draft acceptance ratio over the trailing baseline window before the window (only where the history covers it).", "service"),
        MetricDef("inference_spec_decode_acceptance_baseline_ratio", "gauge", _SVC, "The window's draft acceptance ratio divided by its baseline's: well below 1 speculation saves less than it used to.", "service"),
        MetricDef("inference_ttft_seconds", "summary", _SVC_Q, "Time to first token, quantiles over the window (histogram_quantile of the engine's buckets).", "service"),
        MetricDef("inference_tpot_seconds", "summary", _SVC_Q, "Time per output token (per request; inter-token latency where the engine has only that).", "service"),
        MetricDef("inference_e2e_latency_seconds", "summary", _SVC_Q, "End-to-end request latency, quantiles over the window.", "service"),
        MetricDef("inference_queue_time_seconds", "summary", _SVC_Q, "Time requests waited in the engine queue, quantiles over the window.", "service"),
        MetricDef("inference_prefill_time_seconds", "summary", _SVC_Q, "Time requests spent in prefill (scheduled to first token), quantiles over the window (vLLM).", "service"),
        MetricDef("inference_decode_time_seconds", "summary", _SVC_Q, "Time requests spent in decode (first token to last), quantiles over the window (vLLM).", "service"),
        MetricDef("inference_request_inference_time_seconds", "summary", _SVC_Q, "Time requests spent running (prefill + decode, queue excluded), quantiles over the window (vLLM).", "service"),
        MetricDef("inference_request_preemptions", "summary", _SVC_Q, "Times a finished request was preempted, quantiles over the window (vLLM >= 0.32 request_num_preemptions; its first bucket is le=1, so quantiles below 1 only say 'at most once').", "service"),
        MetricDef("inference_estimated_flops_per_second", "gauge", _SVC, "The model's estimated FLOP/s (vLLM >= 0.32 estimated_flops_per_gpu, summed over its engines): achieved compute, MFU's numerator; over the GPUs' peak FLOP/s it is the MFU.", "service"),
        MetricDef("inference_estimated_memory_read_bytes_per_second", "gauge", _SVC, "The model's estimated memory reads per second (vLLM >= 0.32 estimated_read_bytes_per_gpu, summed over its engines): achieved bandwidth, against the GPU's peak.", "service"),
        MetricDef("inference_estimated_memory_write_bytes_per_second", "gauge", _SVC, "The model's estimated memory writes per second (vLLM >= 0.32 estimated_write_bytes_per_gpu, summed over its engines).", "service"),
        MetricDef("inference_admission_rejections_per_second", "gauge", _SVC, "Requests the engine's front end refused at admission (a queue limit: --max-num-queued-reqs/-tokens), per second (vLLM >= 0.32): the client got HTTP 503 and the request never ran, so it is in no request rate; the HTTP 5xx side of the error ratio counts it.", "service"),
        # KV-cache tiers, P/D transfer and MoE balance (docs/engines.md, "Tiers, P/D and MoE"). `tier`:
        # "host" for vLLM's CPU offloading connector and SGLang's HiCache host pool, vLLM's own tier
        # label ("0:primary", "1:fs", ...) for its multi-tier offloading.
        MetricDef("inference_kv_tier_load_seconds", "summary", (*_SVC, "tier", "quantile"), "Time to load KV from an offload tier back into GPU memory (swap-back), quantiles over the window (histogram_quantile of SGLang HiCache's load_back_duration_seconds). vLLM's offloading connector has no latency histogram: see inference_kv_tier_load_mean_seconds.", "service"),
        MetricDef("inference_kv_tier_store_seconds", "summary", (*_SVC, "tier", "quantile"), "Time to store KV from GPU memory into an offload tier (swap-out), quantiles over the window (SGLang hicache_backup_duration_seconds, else eviction_duration_seconds).", "service"),
        MetricDef("inference_kv_tier_load_mean_seconds", "gauge", (*_SVC, "tier"), "Mean time per load from an offload tier into GPU memory over the window: load time / loads (vLLM kv_offload load time over the load-size histogram's count; SGLang load_back_duration_seconds sum / count).", "service"),
        MetricDef("inference_kv_tier_load_bytes_per_second", "gauge", (*_SVC, "tier"), "Bytes loaded from an offload tier into GPU memory per second (vLLM kv_offload_load_bytes / total_bytes{transfer_type=CPU_to_GPU}, multi-tier read_bytes; SGLang load_back_bytes_total).", "service"),
        MetricDef("inference_kv_tier_store_bytes_per_second", "gauge", (*_SVC, "tier"), "Bytes stored from GPU memory into an offload tier per second (vLLM kv_offload_store_bytes / total_bytes{transfer_type=GPU_to_CPU}, multi-tier write_bytes; SGLang hicache_backup_bytes_total).", "service"),
        MetricDef("inference_kv_tier_load_tokens_per_second", "gauge", (*_SVC, "tier"), "Tokens of KV loaded from an offload tier into GPU memory per second, where the engine counts tokens rather than bytes (SGLang load_back_tokens_total).", "service"),
        MetricDef("inference_kv_tier_store_tokens_per_second", "gauge", (*_SVC, "tier"), "Tokens of KV stored from GPU memory into an offload tier per second, where the engine counts tokens rather than bytes (SGLang hicache_backup_tokens_total).", "service"),
        MetricDef("inference_kv_tier_loads_per_second", "gauge", (*_SVC, "tier"), "Load operations from an offload tier into GPU memory per second (the load latency or load size histogram's count).", "service"),
        MetricDef("inference_kv_tier_evictions_per_second", "gauge", (*_SVC, "tier"), "Eviction operations from GPU memory to an offload tier per second (SGLang eviction_duration_seconds count).", "service"),
        MetricDef("inference_kv_tier_reload_ratio", "gauge", (*_SVC, "tier"), "KV loaded back from a tier per KV evicted to it over the window, in one unit (SGLang tokens: load_back / evicted; vLLM bytes: load / store). Near 1 the tier loads back what the GPU just evicted: it thrashes.", "service"),
        MetricDef("inference_kv_tier_hit_ratio", "gauge", (*_SVC, "tier"), "Lookups in an offload tier that found the KV, over all its lookups, over the window (vLLM multi-tier offloading chunk_hits / chunk_queries).", "service"),
        MetricDef("inference_kv_tier_usage_ratio", "gauge", ("target", "model", "tier"), "Used share 0-1 of an offload tier's capacity (SGLang hicache_host_used_tokens / hicache_host_total_tokens).", "service"),
        MetricDef("inference_external_prefix_cache_hit_ratio", "gauge", _SVC, "Prompt tokens found in a KV connector's cross-instance cache (LMCache, NIXL P2P) over those looked up, over the window (vLLM external_prefix_cache_hits / queries).", "service"),
        MetricDef("inference_pd_transfer_seconds", "summary", _SVC_Q, "Time of one prefill-to-decode KV transfer, quantiles over the window (vLLM nixl_xfer_time_seconds; SGLang kv_transfer_latency_ms, in seconds).", "service"),
        MetricDef("inference_pd_transfer_ttft_share_ratio", "gauge", _SVC, "Mean P/D KV transfer time over mean TTFT, over the window: the share of time to first token spent moving the prefill's KV.", "service"),
        MetricDef("inference_pd_transfer_failures_per_second", "gauge", _SVC, "P/D KV transfers that failed per second (vLLM nixl_num_failed_transfers; SGLang num_transfer_failed_reqs + num_bootstrap_failed_reqs).", "service"),
        MetricDef("inference_pd_transfer_bytes_per_second", "gauge", _SVC, "Bytes of KV moved from prefill to decode per second (vLLM nixl_bytes_transferred sum).", "service"),
        MetricDef("inference_moe_expert_balancedness_ratio", "gauge", _SVC, "MoE expert-parallel balance over the window: mean over max load per GPU, averaged over layers and forward modes (1 = even; SGLang eplb_balancedness sum / count). Never per layer x rank.", "service"),
        MetricDef("inference_prompt_tokens_cached_per_second", "gauge", (*_SVC, "source"), "Prompt tokens found in a prefix cache per second, by the tier that held them (vLLM >= 0.32 prompt_tokens_cached_by_source: device, host, disk, p2p, external_unspecified).", "service"),
        MetricDef("inference_slo_attainment_ratio", "gauge", (*_SVC, "objective"), "Share of requests within the objective (ttft or tpot), interpolated inside buckets.", "service"),
        MetricDef("inference_slo_objective_seconds", "gauge", ("objective",), "The configured real-time objectives.", "service"),
        MetricDef("inference_requests_running", "gauge", ("target", "model"), "Requests in the engine's running batch.", "service"),
        MetricDef("inference_requests_waiting", "gauge", ("target", "model"), "Requests waiting in the engine's queue.", "service"),
        MetricDef("inference_kv_cache_usage_ratio", "gauge", ("target", "model"), "KV-cache usage 0-1 (the fullest engine of the model on the target).", "service"),
        MetricDef("inference_rank_requests_running", "gauge", ("target", "model", "rank"), "Requests running per data-parallel rank (vLLM's engine label, SGLang's dp_rank).", "service"),
        MetricDef("inference_rank_requests_waiting", "gauge", ("target", "model", "rank"), "Requests waiting per data-parallel rank.", "service"),
        MetricDef("inference_rank_kv_cache_usage_ratio", "gauge", ("target", "model", "rank"), "KV-cache usage 0-1 per data-parallel rank.", "service"),
        MetricDef("inference_rank_imbalance_ratio", "gauge", ("target", "model"), "Load (running + waiting) of the busiest data-parallel rank over the mean of all ranks; 1 is even. Only with two ranks or more and any load.", "service"),
        MetricDef("inference_requests_waiting_by_reason", "gauge", ("target", "model", "reason"), "Waiting requests by why they wait (vLLM >= 0.33): capacity (no KV blocks free) or deferred (held back by the scheduler).", "service"),
        MetricDef("inference_engine_sleep_state", "gauge", ("target", "model", "state"), "Engines (ranks) in each sleep state (vLLM sleep mode: awake, weights_offloaded, discard_all).", "service"),
        MetricDef("inference_engines_sleeping", "gauge", ("target", "model"), "Engines (ranks) not awake: a sleeping engine is not an idle one (no throughput-drop alert for it).", "service"),
        MetricDef("inference_lora_adapters", "gauge", ("target", "state"), "LoRA adapters running and waiting (vLLM lora_requests_info; waiting: requests for an adapter not loaded yet).", "service"),
        MetricDef("inference_lora_adapters_max", "gauge", ("target",), "LoRA adapters the engine holds at once (vLLM --max-loras).", "service"),
        MetricDef("inference_spec_decode_engine_acceptance_length", "gauge", ("target", "model"), "Speculative decoding: mean accepted length per step as the engine computes it over its last logging interval (SGLang spec_accept_length, mean over ranks).", "service"),
        MetricDef("inference_spec_decode_engine_acceptance_ratio", "gauge", ("target", "model"), "Speculative decoding: accepted / drafted tokens as the engine computes it over its last logging interval (SGLang spec_accept_rate, mean over ranks).", "service"),
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
        MetricDef("inference_gpu_power_used_ratio", "gauge", _GPU, "Power draw divided by the enforced power limit (what the GPU power alert compares).", "infra"),
        MetricDef("inference_gpu_energy_joules_total", "counter", _GPU, "Energy used since the driver loaded (NVML reads it every 30 s: the call takes milliseconds).", "infra"),
        MetricDef("inference_gpu_sm_clock_hertz", "gauge", _GPU, "Current SM clock.", "infra"),
        MetricDef("inference_gpu_clock_event_active", "gauge", (*_GPU, "reason"), "1 while the clock-event (throttle) reason holds clocks down: sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, hw_power_brake, ...", "infra"),
        MetricDef("inference_gpu_ecc_uncorrected_errors_total", "counter", _GPU, "Uncorrected (double-bit) volatile ECC errors since the driver loaded.", "infra"),
        # infra: GPU health (alerts/infra.yml, docs/runbooks/infra.md say what to do about each)
        MetricDef("inference_gpu_ecc_corrected_errors_total", "counter", _GPU, "Corrected (single-bit) volatile ECC errors since the driver loaded or the GPU was reset.", "infra"),
        MetricDef("inference_gpu_row_remap_correctable_rows", "gauge", _GPU, "Memory rows remapped because of correctable errors (Ampere and newer; NVML nvmlDeviceGetRemappedRows, DCGM 394).", "infra"),
        MetricDef("inference_gpu_row_remap_uncorrectable_rows", "gauge", _GPU, "Memory rows remapped because of uncorrectable errors (DCGM 393).", "infra"),
        MetricDef("inference_gpu_row_remap_pending", "gauge", _GPU, "1 while a row remap waits for a GPU reset to take effect (drain and reset when convenient).", "infra"),
        MetricDef("inference_gpu_row_remap_failed", "gauge", _GPU, "1 once a row remap has failed (no spare row left): the GPU is an RMA case.", "infra"),
        MetricDef("inference_gpu_retired_pages_sbe", "gauge", _GPU, "Memory pages retired after repeated single-bit errors (Volta and older: page retirement).", "infra"),
        MetricDef("inference_gpu_retired_pages_dbe", "gauge", _GPU, "Memory pages retired after a double-bit error (Volta and older).", "infra"),
        MetricDef("inference_gpu_retired_pages", "gauge", _GPU, "Pages retired for either cause; 60 or more fails DCGM's health check (RMA).", "infra"),
        MetricDef("inference_gpu_retired_pages_pending", "gauge", _GPU, "Pages waiting for a reset to be retired (NVML: 1 if any; DCGM: how many).", "infra"),
        MetricDef("inference_gpu_pcie_replay_errors_total", "counter", _GPU, "PCIe replays (link-level retries) since the driver loaded.", "infra"),
        MetricDef("inference_gpu_nvlink_crc_flit_errors_total", "counter", _GPU, "NVLink flow-control CRC errors, summed over the GPU's links.", "infra"),
        MetricDef("inference_gpu_nvlink_crc_data_errors_total", "counter", _GPU, "NVLink data CRC errors, summed over the GPU's links.", "infra"),
        MetricDef("inference_gpu_nvlink_replay_errors_total", "counter", _GPU, "NVLink replays, summed over the GPU's links.", "infra"),
        MetricDef("inference_gpu_nvlink_recovery_errors_total", "counter", _GPU, "NVLink link recoveries, summed over the GPU's links.", "infra"),
        MetricDef("inference_gpu_xid_errors_total", "counter", (*_GPU, "xid"), "XID errors counted since the monitor started: NVML events; dcgm-exporter's DCGM_EXP_XID_ERRORS_TOTAL/_COUNT increases where enabled, else each change of its last-XID gauge (its first non-zero value counts once).", "infra"),
        MetricDef("inference_gpu_xid_events", "gauge", (*_GPU, "xid", "window"), "XID errors counted over the window (1h): what the XID alerts compare; it goes back to 0, so an XID never sticks.", "infra"),
        MetricDef("inference_gpu_errors_increase", "gauge", (*_GPU, "kind", "window"), "Increase of a GPU error counter over the window (10m), counter resets counted as increase() does: kind ecc_uncorrected, ecc_corrected, pcie_replay, nvlink_crc_flit, nvlink_crc_data, nvlink_replay, nvlink_recovery.", "infra"),
        MetricDef("inference_gpu_mig_memory_used_bytes", "gauge", _MIG, "Memory in use in a MIG GPU instance (instances have no utilization).", "infra"),
        MetricDef("inference_gpu_mig_memory_total_bytes", "gauge", _MIG, "Memory of a MIG GPU instance.", "infra"),
        MetricDef("inference_gpu_mig_memory_used_ratio", "gauge", _MIG, "Memory used divided by memory total, per MIG GPU instance.", "infra"),
        MetricDef("inference_gpu_workload_info", "gauge", (*_GPU, "gpu_instance", "pod", "namespace", "container"), "The Kubernetes pod using the GPU (or MIG instance), from dcgm-exporter's labels.", "infra"),
        # quality: per {model}, from the model's newest finished daily run
        MetricDef("inference_quality_score_mean", "gauge", ("model",), "Mean judge score (1-5) of the run's judged samples.", "quality"),
        MetricDef("inference_quality_samples", "gauge", ("model",), "Samples the judge scored in the run (judge errors and suspect verdicts excluded).", "quality"),
        MetricDef("inference_quality_refusal_ratio", "gauge", ("model",), "Share of sampled responses that refused (keyword screen or judge flag).", "quality"),
        MetricDef("inference_quality_hallucination_ratio", "gauge", ("model",), "Share of judged samples the judge flagged as hallucinated.", "quality"),
        MetricDef("inference_quality_output_tokens", "summary", ("model", "quantile"), "Output length of the sampled responses in tokens (given, or estimated from the text), P50/P95.", "quality"),
        MetricDef("inference_quality_output_length_psi", "gauge", ("model",), "Population stability index of output lengths vs. the baseline days (bins at the baseline's deciles).", "quality"),
        MetricDef("inference_quality_output_length_ks_pvalue", "gauge", ("model",), "Two-sample Kolmogorov-Smirnov p-value of output lengths vs. the baseline days.", "quality"),
        MetricDef("inference_quality_output_length_mean_change_ratio", "gauge", ("model",), "Relative change of the mean output length vs. the baseline days ((today - baseline) / baseline).", "quality"),
        MetricDef("inference_quality_score_baseline_delta", "gauge", ("model",), "Mean judge score minus the baseline days' mean score.", "quality"),
        MetricDef("inference_quality_refusal_baseline_ratio", "gauge", ("model",), "Refusal ratio divided by the baseline days' refusal ratio (+Inf after a baseline of none).", "quality"),
        MetricDef("inference_quality_judge_errors", "gauge", ("model",), "Samples whose judgement failed after retries (never given a score).", "quality"),
        MetricDef("inference_quality_judge_error_ratio", "gauge", ("model",), "Share of the run's sampled responses whose judgement failed after retries.", "quality"),
        MetricDef("inference_quality_judged_ratio", "gauge", ("model",), "Share of the run's sampled responses with a usable verdict (no judge error, not suspect).", "quality"),
        MetricDef("inference_quality_judge_suspect_verdicts", "gauge", ("model",), "Verdicts not scored as the model's quality: no reason, or one identical verdict for a varied sample.", "quality"),
        MetricDef("inference_quality_run_failed", "gauge", ("model",), "1 when the model's newest run failed (judge errors over 20 % or under half judged): it has no score.", "quality"),
        MetricDef("inference_quality_last_run_timestamp_seconds", "gauge", ("model",), "Unix time the model's newest run finished.", "quality"),
        MetricDef("inference_quality_last_run_age_seconds", "gauge", ("model",), "Seconds since the model's newest run finished.", "quality"),
        MetricDef("inference_quality_judge_cost_usd_total", "counter", (), "Judge cost of the stored runs: token usage times the configured prices (0 while the judge is unpriced: quality.judge.usd_per_million_*_tokens).", "quality"),
        MetricDef("inference_quality_judge_nonlanguage_reasons", "gauge", ("model",), "Verdicts whose reason is not language (symbols, no word-shaped words, in any script): suspect, not scored.", "quality"),
        MetricDef("inference_quality_judge_uncalibrated", "gauge", ("model",), "1 when the judge of the model's newest run disagreed with the known answers judged among its samples (below the calibration floors): the run has no score, refusal or hallucination figure.", "quality"),
        MetricDef("inference_quality_judge_changed", "gauge", ("model",), "1 when the judge of the model's newest run differs from its baseline days' (identity or calibration): the score is not compared with the baseline.", "quality"),
        MetricDef("inference_quality_judge_agreement_kappa", "gauge", ("model", "judge"), "Quadratic-weighted Cohen's kappa of the judge's scores against the known answers judged in the model's newest run.", "quality"),
        MetricDef("inference_quality_judge_agreement_exact_ratio", "gauge", ("model", "judge"), "Share of the known answers the judge scored exactly as expected (newest run).", "quality"),
        MetricDef("inference_quality_judge_agreement_within_one_ratio", "gauge", ("model", "judge"), "Share of the known answers the judge scored within 1 point of the expected score (newest run).", "quality"),
        MetricDef("inference_quality_judge_agreement_refusal_ratio", "gauge", ("model", "judge"), "Share of the known answers whose refusal flag the judge matched (newest run).", "quality"),
        MetricDef("inference_quality_judge_agreement_hallucination_ratio", "gauge", ("model", "judge"), "Share of the known answers whose hallucination flag the judge matched (newest run).", "quality"),
        MetricDef("inference_quality_judge_calibration_bias", "gauge", ("model", "judge"), "Mean of the judge's score minus the expected score on the known answers (newest run): negative is a harsher judge.", "quality"),
        MetricDef("inference_quality_judge_calibration_answers", "gauge", ("model", "judge"), "Known answers the judge gave a verdict on in the model's newest run.", "quality"),
        # canary: per {probe, model}, what one synthetic user saw through the OpenAI-compatible API (the last probe)
        MetricDef("inference_canary_up", "gauge", _CANARY, "1 if the last canary probe got a complete streamed answer that matched its `expect`; 0 on any failure.", "canary"),
        MetricDef("inference_canary_ttft_seconds", "gauge", _CANARY, "Time to the first content token of the last probe, on the client's clock (network, gateway and engine).", "canary"),
        MetricDef("inference_canary_tpot_seconds", "gauge", _CANARY, "Mean time per output token after the first, of the last probe, on the client's clock.", "canary"),
        MetricDef("inference_canary_e2e_seconds", "gauge", _CANARY, "End-to-end time of the last probe whose stream completed, request sent to stream end.", "canary"),
        MetricDef("inference_canary_output_tokens", "gauge", _CANARY, "Output tokens of the last probe (the stream's usage, else its content chunks).", "canary"),
        MetricDef("inference_canary_probes_total", "counter", (*_CANARY, "outcome"), "Probes by outcome: ok, refused, timeout, rate_limited, http_4xx, http_5xx, connection_error, broken_stream, bad_response, empty_answer, expect_mismatch.", "canary"),
        MetricDef("inference_canary_consecutive_failures", "gauge", _CANARY, "Probes failed in a row (0 after a good one).", "canary"),
        MetricDef("inference_canary_ttft_gap_seconds", "gauge", (*_CANARY, "target"), "Client TTFT of the last probe minus the engine's own P50 TTFT for the probe's target over the gap window: what the path in front of the engine adds.", "canary"),
        # cost: spend rates per fleet {}, {target} and {model} (the last two where service.targets say which GPUs serve them)
        MetricDef("inference_cost_price_known", "gauge", _GPU, "1 if the GPU has a price (cost.gpu_prices, cost.node_prices, the defaults); 0: its spend is not counted.", "cost"),
        MetricDef("inference_gpu_serving_asleep", "gauge", ("node", "gpu"), "1 when every engine of every target this GPU serves is asleep (vLLM sleep mode): idle by design, no GPUUtilizationLow; 0 otherwise. GPUs serving no target have none.", "cost"),
        MetricDef("inference_cost_gpu_price_usd_per_hour", "gauge", (*_GPU, "model"), "The price that applies to the GPU, per hour, in USD.", "cost"),
        MetricDef("inference_cost_usd_per_hour", "gauge", ("target", "model"), "Spend rate of the priced GPUs: fleet-wide (no labels), per target and per model of the mapped targets.", "cost"),
        MetricDef("inference_cost_idle_usd_per_hour", "gauge", (), "Spend on idle GPU time: sum of price x (1 - utilization) over the GPUs with a reading.", "cost"),
        MetricDef("inference_cost_idle_ratio", "gauge", (), "Idle spend divided by the spend of the same GPUs (those with a utilization reading).", "cost"),
        MetricDef("inference_cost_usd_per_million_tokens", "gauge", ("model", "window", "tokens"), "Spend of the model's GPUs / its token throughput over the window, per 1M tokens (generated, or all = prompt + generated); without a model label: the fleet's spend / every target's tokens, once every GPU is priced.", "cost"),
        MetricDef("inference_cost_per_token_baseline_ratio", "gauge", ("model", "window"), "$/1M generated tokens over the window divided by the same over the trailing baseline before it.", "cost"),
        MetricDef("inference_cost_expensive_request_ratio", "gauge", ("model", "window", "tokens"), "Share of the window's requests whose prompt (tokens=prompt) or output (tokens=generated) length exceeds cost.expensive_factor x the baseline's P99.", "cost"),
        MetricDef("inference_cost_usd_total", "counter", ("target", "model"), "Cumulative spend (persisted across restarts): fleet-wide, per target, per model.", "cost"),
        MetricDef("inference_cost_idle_usd_total", "counter", (), "Cumulative idle spend (persisted across restarts).", "cost"),
        MetricDef("inference_cost_today_usd", "gauge", (), "Spend since local midnight in cost.timezone.", "cost"),
        MetricDef("inference_cost_daily_budget_usd", "gauge", (), "The configured daily budget (cost.daily_budget_usd).", "cost"),
        MetricDef("inference_cost_budget_used_ratio", "gauge", (), "Today's spend divided by the daily budget.", "cost"),
        # self
        MetricDef("inference_monitor_collector_success", "gauge", ("collector", "target"), "1 if the collector's last run succeeded.", "self"),
        MetricDef("inference_monitor_collector_duration_seconds", "gauge", ("collector", "target"), "Duration of the collector's last run.", "self"),
        MetricDef("inference_monitor_last_success_timestamp_seconds", "gauge", ("collector", "target"), "Unix time of the collector's last successful run.", "self"),
        MetricDef("inference_monitor_scrape_lag_seconds", "gauge", ("collector",), "How far behind schedule the collector's scrapes ran over the last interval (start after its slot plus the wait for the parse thread); near 0 while it keeps up.", "service"),
        MetricDef("inference_monitor_stale_targets", "gauge", ("collector",), "Targets whose numbers are withheld because the monitor fell behind scraping them (inference_target_stale == 1): it is blind to them.", "service"),
        MetricDef("inference_monitor_scrapes_skipped_total", "counter", ("collector",), "Scrapes not started at their slot because the target's previous scrape was still running or the loop fell behind by a whole interval.", "service"),
        MetricDef("inference_monitor_job_healthy", "gauge", ("job",), "1 while the scheduled job makes progress; 0 when it stopped or its last good step is older than a few intervals (/healthz then fails).", "self"),
        MetricDef("inference_monitor_job_last_progress_timestamp_seconds", "gauge", ("job",), "Unix time the job's last step ended without an error.", "self"),
        MetricDef("inference_monitor_job_skipped_runs_total", "counter", ("job",), "Runs of the job the scheduler skipped: the previous run was still going (one at a time, never stacked), or the process was too busy to start it within its grace time; counted here, not logged once per skip.", "self"),
        MetricDef("inference_monitor_job_errors_total", "counter", ("job",), "Unexpected exceptions caught in the job's steps (each logged; the job went on).", "self"),
        MetricDef("inference_monitor_event_loop_lag_seconds", "gauge", ("stat",), "How late the event loop woke from a 0.1 s sleep: the last wake-up (stat=last) and the latest minute's largest (stat=max_1m): the delay /healthz sees too.", "self"),
        MetricDef("inference_monitor_store_recreations_total", "counter", (), "Times the SQLite database file was found deleted and created again (empty, at schema head): the history, alert states and undelivered notifications it held were lost.", "store"),
        MetricDef("inference_monitor_config_last_reload_successful", "gauge", (), "0 when the last configuration reload (SIGHUP) failed; the running configuration was kept.", "self"),
        # alerting: the embedded evaluator
        MetricDef("inference_monitor_alerts_firing", "gauge", ("severity",), "Alerts the embedded evaluator has firing now, per severity (0 for each severity the rules use).", "alerting"),
        # alerting: delivery of notifications (the outbox and its receivers)
        MetricDef("inference_monitor_notifications_total", "counter", ("receiver", "outcome"), "Notification send attempts by outcome: sent, retried (will try again), failed (given up: a permanent error), dropped_expired (past the retry deadline); sent_direct, retried_direct, failed_direct: the monitor's own alerts (layer=monitor) sent from memory while the store could not take them.", "alerting"),
        MetricDef("inference_monitor_outbox_pending", "gauge", ("receiver",), "Notifications queued for the receiver and not yet delivered.", "alerting"),
        MetricDef("inference_monitor_notifications_failing", "gauge", ("receiver",), "1 while the receiver's last send attempt failed.", "alerting"),
        MetricDef("inference_monitor_outbox_oldest_pending_seconds", "gauge", ("receiver",), "How long the receiver's oldest undelivered notification has waited (0 when none waits).", "alerting"),
    ]
}


def family(name: str) -> Metric:
    """A fresh, empty family for a catalogued metric (KeyError for one that is not catalogued)."""
    definition = CATALOG[name]
    if definition.type == "counter":
        # prometheus_client names a counter family without `_total` and adds it to samples.
        return Metric(name.removesuffix("_total"), definition.help, "counter")
    return Metric(name, definition.help, definition.type)
