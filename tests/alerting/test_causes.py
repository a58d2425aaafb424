"""The probable-cause table and the context on crafted views: every cause id, the table's
order, configurable thresholds, a GPU alert naming its targets, and facts left out (not 0)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from monitor.alerting.causes import CAUSES, probable_cause
from monitor.alerting.context import build_context
from monitor.alerting.explain import explain
from monitor.config import CauseSettings, ConfigError, load_settings
from monitor.exporter import make_registry, render_text
from monitor.infra.reading import GpuErrors, GpuReading
from monitor.infra.render import render_infra
from monitor.quality.render import render_quality
from monitor.service.render import render_service
from monitor.service.view import TargetView
from monitor.settings_check import load_checked_settings
from tests.alerting.contextviews import MODEL, NODE, assert_context_matches, gpu, quality_view, ranked, target, views

TTFT = {"alertname": "TTFTP99High", "target": "vllm-a", "model": MODEL, "window": "5m"}
DEFAULTS = CauseSettings()

SCENARIOS = {
    "target_down": views([target(up=False)], [gpu()]),
    "engine_unrecognised": views([TargetView("vllm-a", True, None, None, recognized=False)], [gpu()]),
    "engine_errors": views([target(error_ratio=0.2)], [gpu(util=0.99, reasons=("sw_power_cap",))]),
    "kv_cache_pressure": views([target(kv=0.97, waiting=30, preemptions_per_second=2.5)],
                               [gpu(util=0.99, reasons=("hw_thermal",))]),
    "gpu_memory": views([target(waiting=2)], [gpu(util=0.99, mem=0.97, reasons=("sw_power_cap",))]),
    "gpu_throttling": views([target(waiting=2)], [gpu(util=0.99, reasons=("gpu_idle", "sw_thermal"))]),
    "queue_saturation": views([target(waiting=12, running=64)], [gpu(util=0.98, reasons=("sw_power_cap",))]),
    "traffic_drop": views([target(throughput_baseline_ratio=0.4, waiting=0)], [gpu(util=0.2)]),
    # One of two DP ranks holds all 14 requests while 9 wait, on busy GPUs: the rank, not capacity.
    "rank_imbalance": views([ranked(target(waiting=9, running=5), running={"0": 5, "1": 0}, waiting={"0": 9, "1": 0})],
                            [gpu(util=0.98, reasons=("sw_power_cap",))]),
    "engine_asleep": views([ranked(target(waiting=0, running=0, throughput_baseline_ratio=0.0),
                                   sleep={"awake": 1, "weights_offloaded": 1})], [gpu(util=0.0)]),
    # The cache finds 10 % of the prompt tokens where it found 60 %, on GPUs busy near their power cap
    # (routine): the lost prefixes, not the hardware.
    "prefix_cache_drop": views([target(waiting=2, prefix_cache_hit_ratio=0.1, prefix_cache_hit_ratio_baseline=0.6)],
                               [gpu(util=0.95, reasons=("sw_power_cap",))]),
    # The engine fails requests on a GPU that logged XID 48 (a double-bit ECC error): the GPU.
    "gpu_fault": views([target(error_ratio=0.2)],
                       [replace(gpu(util=0.99), errors=GpuErrors({"48": 1.0}, {"48": 1.0}))]),
    # The host tier's swap back takes 80 ms at P99 while 8 requests wait on busy GPUs: the swap back.
    "kv_swap_back": views([target(waiting=8, running=64, quantiles={"kv_load/host": {0.5: 0.01, 0.99: 0.08}})],
                          [gpu(util=0.98, reasons=("sw_power_cap",))]),
    # The P/D transfer takes 45 % of the mean TTFT: the transfer, not the queue behind it.
    "pd_transfer": views([target(waiting=8, running=64, pd_transfer_ttft_share_ratio=0.45)],
                         [gpu(util=0.98, reasons=("sw_power_cap",))]),
    # The host tier loads back 95 % of what the GPU evicts to it, 12 loads/s, on a full KV cache: thrashing.
    "kv_tier_thrashing": views([target(kv=0.97, waiting=2, kv_tiers={"host": {"reload_ratio": 0.95,
                                                                              "loads_per_second": 12.0}})],
                               [gpu(util=0.95, reasons=("sw_power_cap",))]),
    "moe_imbalance": views([target(waiting=2, moe_expert_balancedness_ratio=0.45)],
                           [gpu(util=0.95, reasons=("sw_power_cap",))]),
    "unknown": views([target()], [gpu()]),
}


def test_gpu_faults_name_the_gpu_and_only_faults_count() -> None:
    down = views([target(up=False)], [replace(gpu(up=False), errors=GpuErrors({"79": 1.0}, {"79": 1.0}))])
    target_down = {"alertname": "TargetDown", "target": "vllm-a"}
    cause = probable_cause(build_context(target_down, down), DEFAULTS)
    assert cause.startswith("gpu_fault: GPU node-1/0 under the target reports XID 79")
    # A pending row remap is no fault (work runs on); an XID that left the hour is none either.
    calm = views([target(error_ratio=0.2)], [replace(gpu(), reading=GpuReading(row_remap_pending=1.0),
                                                       errors=GpuErrors({"48": 1.0}, {"48": 0.0}))])
    assert cause_id(probable_cause(build_context(TTFT, calm), DEFAULTS)) == "engine_errors"
    # A GPU alert on a GPU whose row remap failed: the hardware, not its load.
    failed = views([target(running=3)], [replace(gpu(util=0.99), reading=GpuReading(
        kernel_active_ratio=0.99, row_remap_failed=1.0, ecc_uncorrected_errors=2.0))])
    gpu_alert = {"alertname": "GPUUtilizationSaturated", "node": NODE, "gpu": "0", "layer": "infra"}
    assert probable_cause(build_context(gpu_alert, failed), DEFAULTS) == (
        "gpu_fault: GPU node-1/0 reports 2 uncorrectable ECC errors, a failed row remap: a hardware fault, "
        "not load (docs/runbooks/infra.md).")


def test_kv_tier_and_pd_causes_name_the_tier_and_hold_to_their_thresholds() -> None:
    assert probable_cause(build_context(TTFT, SCENARIOS["kv_swap_back"]), DEFAULTS) == (
        "kv_swap_back: loading offloaded KV back from the host tier takes 80 ms at P99: requests whose prefix was "
        "offloaded wait for it before their first token (docs/runbooks/kv-tiers.md).")
    within = views([target(waiting=8, running=64, quantiles={"kv_load/host": {0.99: 0.0375}},
                           pd_transfer_ttft_share_ratio=0.1)], [gpu(util=0.98)])
    assert cause_id(probable_cause(build_context(TTFT, within), DEFAULTS)) == "queue_saturation"
    assert cause_id(probable_cause(build_context(TTFT, within), CauseSettings(kv_swap_back_seconds=0.03))) == (
        "kv_swap_back")
    # A tier that serves its blocks many times (3 loads back per eviction) is a cache, not thrashing.
    reuse = views([target(kv=0.97, waiting=2, kv_tiers={"host": {"reload_ratio": 3.0, "loads_per_second": 12.0}})],
                  [gpu(util=0.95, reasons=("sw_power_cap",))])
    assert cause_id(probable_cause(build_context(TTFT, reuse), DEFAULTS)) == "gpu_throttling"
    failing = views([target(pd_transfer_failures_per_second=0.05, pd_transfer_ttft_share_ratio=0.1)], [gpu()])
    assert probable_cause(build_context(TTFT, failing), DEFAULTS).startswith(
        "pd_transfer: 0.05 prefill-to-decode KV transfers/s fail")


def test_a_prefix_cache_that_found_little_before_is_no_cause() -> None:
    # 2 % -> 0.5 %: a quarter of its baseline, but it never held a real share of the prompts.
    small = views([target(waiting=2, prefix_cache_hit_ratio=0.005, prefix_cache_hit_ratio_baseline=0.02)],
                  [gpu(util=0.95, reasons=("sw_power_cap",))])
    assert cause_id(probable_cause(build_context(TTFT, small), DEFAULTS)) == "gpu_throttling"
    steady = views([target(waiting=2, prefix_cache_hit_ratio=0.55, prefix_cache_hit_ratio_baseline=0.6)],
                   [gpu(util=0.95, reasons=("sw_power_cap",))])
    assert cause_id(probable_cause(build_context(TTFT, steady), DEFAULTS)) == "gpu_throttling"
    dropped = probable_cause(build_context(TTFT, SCENARIOS["prefix_cache_drop"]), DEFAULTS)
    assert "finds 10 % of the prompt tokens against 60 % over its baseline" in dropped


def test_a_prefix_cache_ratio_over_a_few_requests_is_no_cause() -> None:
    # A fifth of the traffic: 0.05 requests/s finish, 3 in the alert's 1m window, and the two short
    # prompts among them found nothing. Nobody waits: less traffic, not a lost cache.
    drop = {"alertname": "ThroughputDrop", "target": "vllm-a", "model": MODEL, "window": "1m"}
    few = views([target(waiting=0, throughput_baseline_ratio=0.2, requests_per_second=0.05,
                        prefix_cache_hit_ratio=0.1, prefix_cache_hit_ratio_baseline=0.35)], [gpu(util=0.2)])
    assert cause_id(probable_cause(build_context(drop, few), DEFAULTS)) == "traffic_drop"
    # The same ratios over 30 requests are the cache's; the threshold is configurable.
    enough = views([target(waiting=0, throughput_baseline_ratio=0.2, requests_per_second=0.5,
                           prefix_cache_hit_ratio=0.1, prefix_cache_hit_ratio_baseline=0.35)], [gpu(util=0.2)])
    assert cause_id(probable_cause(build_context(drop, enough), DEFAULTS)) == "prefix_cache_drop"
    stricter = CauseSettings(prefix_cache_min_requests=31)
    assert cause_id(probable_cause(build_context(drop, enough), stricter)) == "traffic_drop"
    # Of two targets, the one with enough requests speaks for the cache.
    two = views([target(waiting=0, throughput_baseline_ratio=0.2, requests_per_second=0.05,
                        prefix_cache_hit_ratio=0.0, prefix_cache_hit_ratio_baseline=0.35),
                 target("vllm-b", waiting=0, throughput_baseline_ratio=0.2, requests_per_second=1.0,
                        prefix_cache_hit_ratio=0.1, prefix_cache_hit_ratio_baseline=0.4)], [gpu(util=0.2)])
    by_model = {"alertname": "ThroughputDrop", "model": MODEL, "window": "1m"}
    assert "finds 10 % of the prompt tokens against 40 %" in probable_cause(build_context(by_model, two), DEFAULTS)


def test_balanced_ranks_leave_the_queue_to_capacity() -> None:
    balanced = views([ranked(target(waiting=12, running=64), running={"0": 32, "1": 32}, waiting={"0": 6, "1": 6})],
                     [gpu(util=0.98, reasons=("sw_power_cap",))])
    assert cause_id(probable_cause(build_context(TTFT, balanced), DEFAULTS)) == "queue_saturation"
    hot = probable_cause(build_context(TTFT, SCENARIOS["rank_imbalance"]), DEFAULTS)
    assert "busiest data-parallel rank holds 2x the mean" in hot  # 14 of (14 + 0) / 2


def cause_id(text: str) -> str:
    return text.split(":", 1)[0]


@pytest.mark.parametrize("expected", list(SCENARIOS))
def test_each_cause_from_its_evidence(expected: str) -> None:
    cause = probable_cause(build_context(TTFT, SCENARIOS[expected]), DEFAULTS)
    assert cause_id(cause) == expected
    assert cause.count("\n") == 0 and cause.endswith(".")


def test_the_table_covers_every_id_and_sentences_fill() -> None:
    assert {rule.id for rule in CAUSES if rule.layer == "service"} | {"unknown"} == set(SCENARIOS)
    texts = {name: probable_cause(build_context(TTFT, v), DEFAULTS) for name, v in SCENARIOS.items()}
    assert all("?" not in text for text in texts.values()), texts
    assert "97 %" in texts["kv_cache_pressure"] and "2.5" in texts["kv_cache_pressure"]
    assert "sw_thermal" in texts["gpu_throttling"] and "gpu_idle" not in texts["gpu_throttling"]
    assert texts["target_down"].startswith("target_down: vllm-a does not answer")
    # unknown says which facts were checked, with their values
    assert "kv_cache 30 %" in texts["unknown"] and "gpu_utilization 50 %" in texts["unknown"]


def test_queue_without_gpu_readings_uses_running_requests() -> None:
    no_gpus = views([target(waiting=12, running=64)], [], gpus_of={})
    assert cause_id(probable_cause(build_context(TTFT, no_gpus), DEFAULTS)) == "queue_saturation"
    idle_engine = views([target(waiting=12, running=0)], [], gpus_of={})
    assert cause_id(probable_cause(build_context(TTFT, idle_engine), DEFAULTS)) == "unknown"


def test_thresholds_are_configurable() -> None:
    memory_93 = views([target()], [gpu(mem=0.93, reasons=("sw_power_cap",))])
    assert cause_id(probable_cause(build_context(TTFT, memory_93), DEFAULTS)) == "gpu_throttling"
    lower = CauseSettings(gpu_memory_ratio=0.9)
    assert cause_id(probable_cause(build_context(TTFT, memory_93), lower)) == "gpu_memory"
    power_cap_is_normal = CauseSettings(throttle_reasons=["hw_thermal", "hw_slowdown"])
    assert cause_id(probable_cause(build_context(TTFT, memory_93), power_cap_is_normal)) == "unknown"
    settings = load_settings(None, {"alerting": {"causes": {"kv_cache_ratio": 0.8, "queue_waiting": 2}}})
    assert settings.alerting.causes.kv_cache_ratio == 0.8 and settings.alerting.causes.queue_waiting == 2


def test_bad_cause_settings_fail_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"causes\.throttle_reasons"):
        load_checked_settings(None, {"alerting": {"causes": {"throttle_reasons": ["sw_thermal", "too_hot"]}}})
    with pytest.raises(ConfigError, match=r"causes\.kv_cach"):
        load_settings(None, {"alerting": {"causes": {"kv_cach": 0.5}}})


def test_gpu_alert_names_its_targets_and_models() -> None:
    two_targets = views([target("vllm-a"), target("vllm-b", waiting=20, running=64)], [gpu("0", util=0.99)],
                        gpus_of={"vllm-a": ["0"], "vllm-b": ["0"]})
    extra = explain({"alertname": "GPUUtilizationSaturated", "node": NODE, "gpu": "0", "layer": "infra"}, two_targets,
                    DEFAULTS)
    lines = extra["context"].splitlines()
    assert f"GPU {NODE}/0 serves: vllm-a ({MODEL}), vllm-b ({MODEL})" in lines
    assert f"vllm-b model={MODEL} window=1m requests waiting: 20" in lines  # no window on it: the shortest, now
    assert cause_id(extra["probable_cause"]) == "queue_saturation"


def test_down_gpu_and_missing_quality_are_left_out_not_zero() -> None:
    down = views([target()], [gpu("0", up=False), gpu("1", util=0.4)])
    text = explain(TTFT, down, DEFAULTS)["context"]
    assert f"GPU {NODE}/0 up: no (no readings)" in text
    assert not [line for line in text.splitlines() if line.startswith(f"GPU {NODE}/0 ") and "up: no" not in line
                and "serves" not in line]
    assert f"GPU {NODE}/1 utilization: 40 %" in text
    assert "quality" not in text  # no quality layer configured (None) ...
    assert "quality" not in explain(TTFT, views([target()], [gpu()], quality=quality_view().__class__()),
                                    DEFAULTS)["context"]  # ... or no run for the model yet
    with_quality = explain(TTFT, views([target()], [gpu()], quality=quality_view()), DEFAULTS)["context"]
    assert f"quality {MODEL} (run 2026-11-29) judge score: 4.2" in with_quality


def test_alert_placed_nowhere_gets_nothing() -> None:
    assert explain({"alertname": "NotificationsFailing", "receiver": "ops"}, SCENARIOS["unknown"], DEFAULTS) == {}
    # a GPU no source of ours shows and no target maps to: nothing, rather than "down"
    assert explain({"alertname": "GPUTemperatureHigh", "node": "elsewhere", "gpu": "3"}, SCENARIOS["unknown"],
                   DEFAULTS) == {}
    mapped_unseen = views([target()], [], gpus_of={"vllm-a": ["7"]})
    text = explain(TTFT, mapped_unseen, DEFAULTS)["context"]
    assert f"GPU {NODE}/7 readings: none (no GPU source shows it)" in text and "up: no" not in text
    assert explain({"alertname": "TTFTP99High", "target": "gone"}, views([], []), DEFAULTS) == {}


def test_context_equals_what_metrics_renders_from_the_same_views() -> None:
    scenario = views([target(kv=0.9712, waiting=30, preemptions_per_second=2.5, error_ratio=0.0123)],
                     [gpu("0", util=0.99, reasons=("sw_power_cap",)), gpu("1", up=False)], quality=quality_view())
    assert scenario.quality is not None
    registry = make_registry([lambda: render_service(scenario.service), lambda: render_infra(scenario.infra),
                              lambda: render_quality(scenario.quality, 2.0)])  # type: ignore[arg-type]
    text = explain(TTFT, scenario, DEFAULTS)["context"]
    assert assert_context_matches(text, render_text(registry).decode()) >= 17


def test_a_gpu_health_alert_names_the_targets_and_models_on_the_gpu() -> None:
    sick = replace(gpu(), reading=GpuReading(kernel_active_ratio=0.9, row_remap_pending=1.0))
    world = views([target(), target("vllm-b")], [sick, gpu("1")], gpus_of={"vllm-a": ["0"], "vllm-b": ["1"]})
    labels = {"alertname": "GPURowRemapPending", "node": NODE, "gpu": "0", "layer": "infra"}
    context = build_context(labels, world)
    assert [t.target for t in context.targets] == ["vllm-a"] and context.models == (MODEL,)
    assert [(g.node, g.gpu, g.targets) for g in context.gpus] == [(NODE, "0", ("vllm-a",))]
