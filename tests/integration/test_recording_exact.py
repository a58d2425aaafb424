"""The generated recording rules give the monitor's numbers, in the real Prometheus.

1. Exact: the samples the monitor scraped (two targets, jittered scrapes, an engine restart; see
   test_backfill_exact) are backfilled into Prometheus; every per-target and fleet-wide rule of
   each window, with the series it reads expanded inline, is queried at the last scrape and must
   equal the monitor's number to 1e-9. (Prometheus 2.42 here; the data is where 2.42 and 3.x
   agree, as that test checks. SLO attainment needs histogram_fraction on classic buckets,
   Prometheus >= 3.4, and is not compared here.)
2. Live: Prometheus loads the shipped rule file while it scrapes an engine page with a `target`
   label; every rule evaluates without error and the recorded series carry target/model/window.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from monitor.service.recording import Rule, expand, gauge_rules, window_rules
from tests.conftest import FIXTURES, require_binary
from tests.integration.test_backfill_exact import MODEL, backfilled
from tests.service.pagegen import grow
from tests.support.pageserver import Generated, PageServer
from tests.support.promserver import PrometheusServer

pytestmark = pytest.mark.prometheus
SHIPPED = Path(__file__).parents[2] / "deploy" / "prometheus" / "recording.yml"

_ATTRIBUTES = {
    "inference_requests_per_second": "requests_per_second",
    "inference_request_error_ratio": "error_ratio",
    "inference_prompt_tokens_per_second": "prompt_tokens_per_second",
    "inference_generation_tokens_per_second": "generation_tokens_per_second",
    "inference_preemptions_per_second": "preemptions_per_second",
    "inference_aborted_requests_per_second": "aborted_requests_per_second",
    "inference_throughput_baseline_ratio": "throughput_baseline_ratio",
    "inference_prefix_cache_hit_ratio": "prefix_cache_hit_ratio",
    "inference_prompt_seconds_per_token": "prompt_seconds_per_token",
    "inference_generation_seconds_per_token": "generation_seconds_per_token",
    "inference_spec_decode_acceptance_ratio": "spec_decode_acceptance_ratio",
    "inference_spec_decode_acceptance_length": "spec_decode_acceptance_length",
    "inference_prefix_cache_hit_ratio_baseline": "prefix_cache_hit_ratio_baseline",
    "inference_prefix_cache_hit_baseline_ratio": "prefix_cache_hit_baseline_ratio",
    "inference_spec_decode_acceptance_ratio_baseline": "spec_decode_acceptance_ratio_baseline",
    "inference_spec_decode_acceptance_baseline_ratio": "spec_decode_acceptance_baseline_ratio",
    "inference_estimated_flops_per_second": "estimated_flops_per_second",
    "inference_estimated_memory_read_bytes_per_second": "estimated_read_bytes_per_second",
    "inference_estimated_memory_write_bytes_per_second": "estimated_write_bytes_per_second",
    "inference_admission_rejections_per_second": "admission_rejections_per_second",
    "inference_external_prefix_cache_hit_ratio": "external_prefix_cache_hit_ratio",
    "inference_moe_expert_balancedness_ratio": "moe_expert_balancedness_ratio",
    "inference_pd_transfer_failures_per_second": "pd_transfer_failures_per_second",
    "inference_pd_transfer_bytes_per_second": "pd_transfer_bytes_per_second",
    "inference_pd_transfer_ttft_share_ratio": "pd_transfer_ttft_share_ratio",
}
_SUMMARIES = {"inference_ttft_seconds": "ttft", "inference_tpot_seconds": "tpot",
              "inference_e2e_latency_seconds": "e2e", "inference_queue_time_seconds": "queue",
              "inference_prefill_time_seconds": "prefill", "inference_decode_time_seconds": "decode",
              "inference_request_inference_time_seconds": "inference",
              "inference_request_preemptions": "request_preemptions", "inference_pd_transfer_seconds": "pd_transfer"}
# Per KV tier (tests/service/test_kv_tiers.py compares them where an engine has tiers; these pages have none).
_TIER_FAMILIES = ("inference_kv_tier_",)


def ours(rule: Rule, stats: Any) -> float | None:
    if rule.record in _ATTRIBUTES:
        value: float | None = getattr(stats, _ATTRIBUTES[rule.record])
        return value
    if rule.record.startswith(_TIER_FAMILIES):
        assert not stats.kv_tiers and not any("/" in key for key in stats.quantiles)
        return None
    quantiles = stats.quantiles.get(_SUMMARIES[rule.record], {})
    return quantiles.get(float(rule.labels["quantile"]))


@pytest.mark.long
def test_recording_rules_give_the_monitors_numbers(tmp_path: Path) -> None:
    monitor, times, prom = backfilled(tmp_path)
    view = monitor.service.view
    compared = baselines = hit_baselines = positions = 0
    with prom:
        for window in ("1m", "5m"):
            rules = window_rules(window, "5m")  # the monitor's baseline_window there
            for rule in rules:
                if rule.record.startswith("inference:"):
                    continue  # intermediate series: checked through the rules that read them
                result = prom.query(expand(rule, rules), at=times[-1])
                assert all(r["metric"].get("model") == MODEL for r in result), (rule.record, result)
                if rule.record == "inference_spec_decode_position_acceptance_ratio":
                    positions += _compare_positions(rule, result, view, window)
                    continue
                by_target = {r["metric"].get("target"): float(r["value"][1]) for r in result}
                for target in (None, "a", "b"):
                    if (target is None) != rule.fleet:
                        continue
                    key = (MODEL, window)
                    stats = view.fleet[key] if target is None else view.targets[target].stats[key]
                    expected = ours(rule, stats)
                    if expected is None:
                        assert target not in by_target, (rule.record, window, target)
                        continue
                    assert by_target[target] == pytest.approx(expected, rel=1e-9, abs=1e-12), (
                        rule.record, rule.labels, target)
                    compared += 1
                    baselines += rule.record == "inference_throughput_baseline_ratio"
                    hit_baselines += rule.record == "inference_prefix_cache_hit_baseline_ratio"
                    if rule.record == "inference_prefix_cache_hit_baseline_ratio" and target == "a":
                        assert expected < 0.9, expected  # the drop the pages make is what was compared
        # Gauges at the last scrape: the values on the last pages.
        for rule in gauge_rules()[1:4]:  # the others: tests/integration/test_recording_gauges.py
            result = prom.query(rule.expr, at=times[-1])
            metric = {"inference_requests_running": "running", "inference_requests_waiting": "waiting",
                      "inference_kv_cache_usage_ratio": "kv_cache"}[rule.record]
            got = {r["metric"]["target"]: float(r["value"][1]) for r in result}
            assert got == pytest.approx({t: view.targets[t].gauges[metric][MODEL] for t in ("a", "b")})
    # 2 windows x (per target a, b + fleet) x (6 rates and ratios + 12 quantiles); baseline ratios are
    # compared wherever the monitor has one.
    assert compared >= 2 * 3 * 17, compared
    assert baselines == 2 * 3  # covered (>= 90 % of the 5m baseline) for both windows, per target and fleet
    assert hit_baselines == 2 * 3  # the prefix-cache hit ratio against its baseline: the same coverage
    assert positions == 2 * 3 * 3  # vLLM 0.33's three draft positions, per target and fleet, both windows


def _compare_positions(rule: Rule, result: list[dict[str, Any]], view: Any, window: str) -> int:
    """The per-position acceptance: one series per (target, position), each the monitor's."""
    got = {(r["metric"].get("target"), r["metric"]["position"]): float(r["value"][1]) for r in result}
    expected = {}
    for target in ((None,) if rule.fleet else ("a", "b")):
        stats = view.fleet[(MODEL, window)] if target is None else view.targets[target].stats[(MODEL, window)]
        expected.update({(target, p): v for p, v in stats.spec_decode_position_acceptance.items()})
    assert got == pytest.approx(expected, rel=1e-9), (rule.record, rule.fleet, window)
    if not rule.fleet:  # the pages accept the later positions less often from step 20 on (target a)
        assert expected[("a", "2")] / expected[("a", "0")] != pytest.approx(
            expected[("b", "2")] / expected[("b", "0")], rel=1e-3)
    return len(expected)


class _RulesServer(PrometheusServer):
    """Prometheus with the shipped recording rules and a `target` label on the engine job."""

    def __init__(self, page_url: str, binary: str) -> None:
        super().__init__({"engines": [page_url]}, interval="1s", binary=binary)

    def _config(self) -> dict[str, Any]:
        config = super()._config()
        config["global"]["evaluation_interval"] = "1s"
        config["rule_files"] = [str(SHIPPED)]
        config["scrape_configs"][0]["static_configs"][0]["labels"] = {"target": "vllm-a"}
        return config


def test_shipped_rules_evaluate_in_prometheus() -> None:
    binary = require_binary("prometheus")
    base = (FIXTURES / "sample_vllm_v1.prom").read_text()
    with PageServer() as pages:
        pages.set("/metrics", Generated(lambda hit: grow(base, 1 + 0.02 * hit)))
        with _RulesServer(pages.url("/metrics"), binary) as prom:
            deadline = time.monotonic() + 40
            while True:
                found = prom.query('inference_requests_per_second{target="vllm-a", window="1m"}')
                fleet = prom.query('inference_ttft_seconds{target="", window="1m", quantile="0.99"}')
                if (found and fleet) or time.monotonic() > deadline:
                    break
                time.sleep(1)
            groups = httpx.get(f"{prom.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
            gauges = prom.query('inference_kv_cache_usage_ratio{target="vllm-a"}')
    assert found and found[0]["metric"]["model"] == MODEL
    assert fleet and "target" not in fleet[0]["metric"]
    assert gauges
    unhealthy = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
    assert not unhealthy, unhealthy
    assert sum(len(g["rules"]) for g in groups) == 378
