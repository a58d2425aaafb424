"""KV-cache tiers, P/D transfer and MoE balance read from engine pages (issue 45).

Pages come from tests/service/tierpages.py (prometheus_client, the engines' real names, types,
labels and buckets), served by a real loopback HTTP server and scraped twice by the monitor,
STEP seconds apart. Every number is checked against the PromQL an operator would write
(`histogram_quantile` over the buckets' `rate()`, ratios of `rate()`s: the reference functions
of monitor.service.promql and tests/support/promql_oracle.py, which Prometheus' own test vectors hold),
and, for the swap-back quantile and the transfer share, against a real Prometheus.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from monitor.service.recording import rule_file_text
from tests.conftest import FIXTURES, require_binary
from tests.service.pairscrape import scrape
from tests.service.tierpages import SGLANG_MODEL, VLLM_MODEL, fixture_pages, sglang_pair, vllm_pair
from tests.support.pageserver import Generated, PageServer
from tests.support.promserver import PrometheusServer


def test_held_out_sglang_swap_back_p99() -> None:
    """A HiCache load-back histogram whose P99 is 37.5 ms gives that P99, exactly histogram_quantile's."""
    got = scrape(*sglang_pair())
    labels = {"model": SGLANG_MODEL, "window": "1m", "tier": "host"}
    p99 = got.one("inference_kv_tier_load_seconds", quantile="0.99", **labels)
    assert p99 == pytest.approx(got.quantile(0.99, "sglang:load_back_duration_seconds"), rel=1e-12)
    assert p99 == pytest.approx(0.0375, rel=1e-9)
    for q in ("0.5", "0.95"):
        assert got.one("inference_kv_tier_load_seconds", quantile=q, **labels) == pytest.approx(
            got.quantile(float(q), "sglang:load_back_duration_seconds"), rel=1e-12)
    assert got.one("inference_kv_tier_store_seconds", quantile="0.99", **labels) == pytest.approx(
        got.quantile(0.99, "sglang:eviction_duration_seconds"), rel=1e-12)
    loads = got.rate("sglang:load_back_duration_seconds_count")
    assert got.one("inference_kv_tier_loads_per_second", **labels) == pytest.approx(loads, rel=1e-12)
    assert got.one("inference_kv_tier_evictions_per_second", **labels) == pytest.approx(
        got.rate("sglang:eviction_duration_seconds_count"), rel=1e-12)
    assert got.one("inference_kv_tier_load_tokens_per_second", **labels) == pytest.approx(
        got.rate("sglang:load_back_tokens_total"), rel=1e-12)
    # 64,000 tokens loaded back for 80,000 evicted: 0.8 of what the GPU evicted came back.
    assert got.one("inference_kv_tier_reload_ratio", **labels) == pytest.approx(0.8, rel=1e-9)
    assert got.one("inference_kv_tier_load_mean_seconds", **labels) == pytest.approx(
        got.rate("sglang:load_back_duration_seconds_sum") / loads, rel=1e-12)
    assert got.one("inference_kv_tier_usage_ratio", model=SGLANG_MODEL, tier="host") == 0.75
    assert "inference_kv_tier_load_bytes_per_second" not in got.exported  # this release counts tokens


def test_sglang_transfer_in_ms_is_exported_in_seconds() -> None:
    got = scrape(*sglang_pair())
    labels = {"model": SGLANG_MODEL, "window": "1m"}
    for q in (0.5, 0.95, 0.99):
        assert got.one("inference_pd_transfer_seconds", quantile=f"{q:g}", **labels) == pytest.approx(
            got.quantile(q, "sglang:kv_transfer_latency_ms", scale=1e-3), rel=1e-12)
    # 30 transfers of 3 ms and 20 of 40 ms (mean 17.8 ms) per 100 first tokens of 0.5 s.
    share = got.one("inference_pd_transfer_ttft_share_ratio", **labels)
    mean_transfer = got.rate("sglang:kv_transfer_latency_ms_sum") / got.rate("sglang:kv_transfer_latency_ms_count")
    mean_ttft = (got.rate("sglang:time_to_first_token_seconds_sum")
                 / got.rate("sglang:time_to_first_token_seconds_count"))
    assert share == pytest.approx(mean_transfer / 1000 / mean_ttft, rel=1e-12)
    assert share == pytest.approx(0.0178 / 0.5, rel=1e-9)
    assert got.one("inference_pd_transfer_failures_per_second", **labels) == pytest.approx(
        got.rate("sglang:num_transfer_failed_reqs_total"), rel=1e-12)
    # EPLB: 50 steps at 0.6 and 50 at 0.9 in the window: mean balancedness 0.75.
    assert got.one("inference_moe_expert_balancedness_ratio", **labels) == pytest.approx(0.75, rel=1e-9)


def test_vllm_nixl_share_offload_and_tiers() -> None:
    got = scrape(*vllm_pair())
    labels = {"model": VLLM_MODEL, "window": "1m"}
    share = got.one("inference_pd_transfer_ttft_share_ratio", **labels)
    mean_xfer = got.rate("vllm:nixl_xfer_time_seconds_sum") / got.rate("vllm:nixl_xfer_time_seconds_count")
    mean_ttft = got.rate("vllm:time_to_first_token_seconds_sum") / got.rate("vllm:time_to_first_token_seconds_count")
    assert share == pytest.approx(mean_xfer / mean_ttft, rel=1e-12)
    assert share == pytest.approx(0.044 / 0.2, rel=1e-9)
    assert got.one("inference_pd_transfer_seconds", quantile="0.99", **labels) == pytest.approx(
        got.quantile(0.99, "vllm:nixl_xfer_time_seconds"), rel=1e-12)
    assert got.one("inference_pd_transfer_failures_per_second", **labels) == pytest.approx(
        got.rate("vllm:nixl_num_failed_transfers_total"), rel=1e-12)
    assert got.one("inference_pd_transfer_bytes_per_second", **labels) == pytest.approx(
        got.rate("vllm:nixl_bytes_transferred_sum"), rel=1e-12)
    host = {**labels, "tier": "host"}
    assert got.one("inference_kv_tier_load_bytes_per_second", **host) == pytest.approx(
        got.rate("vllm:kv_offload_load_bytes_total"), rel=1e-12)
    assert got.one("inference_kv_tier_loads_per_second", **host) == pytest.approx(
        got.rate("vllm:kv_offload_load_size_count"), rel=1e-12)
    # 40 loads of 4 ms and 10 of 12 ms: 5.6 ms a load; 1.2 GB loaded back per 4 GB stored.
    assert got.one("inference_kv_tier_load_mean_seconds", **host) == pytest.approx(0.0056, rel=1e-9)
    assert got.one("inference_kv_tier_reload_ratio", **host) == pytest.approx(0.3, rel=1e-9)
    assert "inference_kv_tier_load_seconds" not in got.exported  # no latency histogram in vLLM's connector
    assert got.one("inference_external_prefix_cache_hit_ratio", **labels) == pytest.approx(0.6, rel=1e-9)
    assert got.one("inference_kv_tier_hit_ratio", **labels, tier="0:primary") == pytest.approx(0.9, rel=1e-9)
    assert got.one("inference_kv_tier_hit_ratio", **labels, tier="1:fs") == pytest.approx(0.25, rel=1e-9)
    assert "inference_moe_expert_balancedness_ratio" not in got.exported


def test_vllm_cpu_tier_printing_both_spellings_counts_each_load_once() -> None:
    # vLLM's CPU tier prints its split load/store families and the older transfer_type ones side by
    # side: read as alternatives (the split one), never summed.
    got, alone = scrape(*vllm_pair(older_too=True)), scrape(*vllm_pair())
    assert "vllm:kv_offload_total_bytes_total" in got.second
    host = {"model": VLLM_MODEL, "window": "1m", "tier": "host"}
    for metric in ("inference_kv_tier_load_bytes_per_second", "inference_kv_tier_store_bytes_per_second",
                   "inference_kv_tier_loads_per_second", "inference_kv_tier_load_mean_seconds"):
        assert got.one(metric, **host) == pytest.approx(alone.one(metric, **host), rel=1e-12), metric
    assert got.one("inference_kv_tier_load_bytes_per_second", **host) == pytest.approx(
        got.rate("vllm:kv_offload_load_bytes_total"), rel=1e-12)


def test_the_recording_rules_count_each_vllm_load_once_too(tmp_path: Path) -> None:
    """promtool runs the generated rules over a vLLM CPU tier printing both spellings: 1 MB/s loaded,
    read from the split family alone."""
    binary = require_binary("promtool")
    (tmp_path / "recording.yml").write_text(rule_file_text(["1m"], "5m", {"ttft": 0.2, "tpot": 0.05}))
    series = {"vllm:kv_offload_load_bytes_total": "",
              "vllm:kv_offload_total_bytes_total": ',transfer_type="CPU_to_GPU"'}
    labels = f'target="vl",model_name="{VLLM_MODEL}",engine="0"'
    test = {"rule_files": ["recording.yml"], "evaluation_interval": "15s", "tests": [{
        "interval": "15s",
        "input_series": [{"series": f"{name}{{{labels}{extra}}}", "values": "0+15000000x8"}
                         for name, extra in series.items()],
        "promql_expr_test": [{"expr": 'inference_kv_tier_load_bytes_per_second{target="vl"}', "eval_time": "2m",
                              "exp_samples": [{"labels": "inference_kv_tier_load_bytes_per_second{"
                                               f'model="{VLLM_MODEL}",target="vl",tier="host",window="1m"}}',
                                               "value": 1e6}]}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    done = subprocess.run([binary, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


class _Engines(PrometheusServer):
    """Prometheus scraping the two engines (a `target` label on each) with the generated recording rules."""

    def __init__(self, urls: dict[str, str], rules: Path, binary: str) -> None:
        super().__init__({}, interval="1s", binary=binary, rule_files=[rules], evaluation_interval="1s")
        self.scrape_configs = [{"job_name": name, "scrape_interval": "1s", "metrics_path": httpx.URL(url).path,
                                "static_configs": [{"targets": [f"{httpx.URL(url).host}:{httpx.URL(url).port}"],
                                                   "labels": {"target": name}}]} for name, url in urls.items()]


@pytest.mark.prometheus
def test_numbers_equal_real_prometheus_and_the_recording_rules(tmp_path: Path) -> None:
    """The real Prometheus scrapes the same pages: its histogram_quantile, its ratios of rate()s and the
    recording rules generated from the engine tables give our quantiles and ratios. (Every series of
    the pages starts at twice what the window adds, so Prometheus' own scrape times scale every rate
    alike: quantiles and ratios do not depend on them.)"""
    binary = require_binary("prometheus")
    pairs = {"sgl": sglang_pair(), "vl": vllm_pair()}
    ours = {name: scrape(*pair) for name, pair in pairs.items()}
    rules = tmp_path / "recording.yml"
    rules.write_text(rule_file_text(["1m"], "5m", {"ttft": 0.2, "tpot": 0.05}))
    checks = {  # PromQL (raw, or a recorded series) -> (target, our metric, its labels)
        "histogram_quantile(0.99, sum by (le) (rate(sglang:load_back_duration_seconds_bucket[1m])))":
            ("sgl", "inference_kv_tier_load_seconds", {"quantile": "0.99", "tier": "host"}),
        "(sum(rate(sglang:kv_transfer_latency_ms_sum[1m])) / sum(rate(sglang:kv_transfer_latency_ms_count[1m]))"
        " / 1000) / (sum(rate(sglang:time_to_first_token_seconds_sum[1m]))"
        " / sum(rate(sglang:time_to_first_token_seconds_count[1m])))":
            ("sgl", "inference_pd_transfer_ttft_share_ratio", {}),
    }
    recorded = [("sgl", "inference_kv_tier_load_seconds", {"quantile": "0.99", "tier": "host"}),
                ("sgl", "inference_kv_tier_store_seconds", {"quantile": "0.95", "tier": "host"}),
                ("sgl", "inference_kv_tier_reload_ratio", {"tier": "host"}),
                ("sgl", "inference_kv_tier_load_mean_seconds", {"tier": "host"}),
                ("sgl", "inference_pd_transfer_seconds", {"quantile": "0.99"}),
                ("sgl", "inference_pd_transfer_ttft_share_ratio", {}),
                ("sgl", "inference_moe_expert_balancedness_ratio", {}),
                ("vl", "inference_pd_transfer_seconds", {"quantile": "0.99"}),
                ("vl", "inference_pd_transfer_ttft_share_ratio", {}),
                ("vl", "inference_kv_tier_reload_ratio", {"tier": "host"}),
                ("vl", "inference_kv_tier_load_mean_seconds", {"tier": "host"}),
                ("vl", "inference_kv_tier_hit_ratio", {"tier": "1:fs"}),
                ("vl", "inference_external_prefix_cache_hit_ratio", {})]
    for target, metric, labels in recorded:
        matchers = ",".join(f'{k}="{v}"' for k, v in {**labels, "target": target, "window": "1m"}.items())
        checks[f"{metric}{{{matchers}}}"] = (target, metric, labels)
    with PageServer() as server:
        urls = {name: server.set(f"/{name}", Generated(_first_then_second(*pair))) for name, pair in pairs.items()}
        with _Engines(urls, rules, binary) as prom:
            theirs = _wait_for(prom, list(checks))
    for (expr, (target, metric, labels)), value in zip(checks.items(), theirs, strict=True):
        assert ours[target].one(metric, window="1m", **labels) == pytest.approx(value, rel=1e-9), expr
    assert ours["sgl"].one("inference_kv_tier_usage_ratio", tier="host") == 0.75


def _first_then_second(first: str, second: str) -> Callable[[int], str]:
    return lambda hit: first if hit == 1 else second


def _wait_for(prom: PrometheusServer, exprs: list[str], timeout: float = 30.0) -> list[float]:
    """Each expression's value once Prometheus has scraped both pages and recorded the rules."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            results = [prom.query(expr) for expr in exprs]
        except httpx.HTTPError:
            results = []
        if results and all(len(r) == 1 for r in results):
            return [float(r[0]["value"][1]) for r in results]
        missing = [e for e, r in zip(exprs, results, strict=False) if len(r) != 1]
        assert time.monotonic() < deadline, f"Prometheus gave no single answer in {timeout} s: {missing}"
        time.sleep(0.2)


def test_fixture_pages_are_what_the_generator_writes() -> None:
    for name, text in fixture_pages().items():
        assert (FIXTURES / "tiers" / name).read_text() == text, f"regenerate tests/fixtures/tiers/{name}"
