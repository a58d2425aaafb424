"""The cost layer inside the monitor, on real loopback servers: a vLLM page, two dcgm-exporter pages.

vllm-a runs in the pod `vllm-llama-*` on gpu-node-01's H100 0 (dcgm-exporter's pod labels say so);
gpu-node-02's H200s are at their default price, a workstation's Tesla T4 has none. Then the long
prompts arrive.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from monitor.config import load_settings
from monitor.cost.prices import PRICES_SET
from monitor.runtime import Monitor
from tests.conftest import FIXTURES
from tests.infra.scrape import Samples, samples, series, value
from tests.service.pagegen import grow
from tests.support.appserver import serve_app
from tests.support.pageserver import Generated, Page, PageServer

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
VLLM = (FIXTURES / "sample_vllm_v1.prom").read_text()
LONG_AFTER = 13  # after this scrape, 60 more requests a scrape with prompts of 10k-20k tokens
T0 = 1_767_240_000.0
_PROMPT_BUCKET = re.compile(r'^(vllm:request_prompt_tokens_bucket\{[^}]*le="([^"]+)"[^}]*\}) (\S+)$', re.M)
_REQUESTS = re.compile(r'^(vllm:request_(?:prompt_tokens_count|success_total\{[^}]*"stop"[^}]*\})) (\S+)$', re.M)


def vllm_page(hit: int) -> str:
    page = grow(VLLM, 1 + 0.1 * hit)  # 120 requests a scrape, lengths as in the fixture
    extra = 60.0 * max(0, hit - LONG_AFTER)

    def long_prompts(match: re.Match[str]) -> str:
        le = float(match.group(2))
        return f"{match.group(1)} {float(match.group(3)) + (extra if le >= 20000 else 0.0)!r}"

    page = _PROMPT_BUCKET.sub(long_prompts, page)
    return _REQUESTS.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + extra!r}", page)


def run(ticks: int, server: PageServer) -> tuple[list[Samples], Monitor]:
    settings = load_settings(None, {
        "service": {"scrape_interval": "15s", "windows": ["1m"], "baseline_window": "2m", "targets": [
            {"name": "vllm-a", "url": server.url("/vllm"), "pod": "vllm-llama-*", "namespace": "inference"}]},
        "infra": {"nvml": {"enabled": "false"}, "dcgm": {"targets": [
            {"name": "node-1", "url": server.url("/dcgm48")}, {"name": "node-2", "url": server.url("/dcgm49")}]}},
        "cost": {"daily_budget_usd": 100, "static_gpus": [{"model": "Tesla T4", "count": 1, "node": "desk"}]},
        # In memory: the module-scoped fixture runs before the tests' autouse in-memory store does.
        "storage": {"url": "sqlite://"},
    })
    clock = [T0]

    async def go() -> tuple[list[Samples], Monitor]:
        monitor = Monitor(settings, wall=lambda: clock[0])
        pages = []
        for tick in range(ticks):
            clock[0] = T0 + 15 * tick
            await monitor.run_once()
            pages.append(samples(monitor.metrics_text().decode()))
        await monitor.aclose()
        return pages, monitor

    return asyncio.run(go())


@contextmanager
def pages() -> Iterator[PageServer]:
    """The vLLM page (scrape n shows the engine n scrapes in) and the two dcgm-exporter pages."""
    with PageServer() as server:
        server.set("/vllm", Generated(vllm_page))
        server.set("/dcgm48", Page((FIXTURES / "sample_dcgm.prom").read_text()))
        server.set("/dcgm49", Page((FIXTURES / "dcgm_4_9.prom").read_text()))
        yield server


@pytest.fixture(scope="module")
def played() -> tuple[list[Samples], Monitor]:
    with pages() as server:
        return run(17, server)


def test_spend_and_dollars_per_million_tokens_from_the_pages(played: tuple[list[Samples], Monitor]) -> None:
    pages, _ = played
    page = pages[12]
    assert value(page, "inference_cost_usd_per_hour") == 2 * 2.5 + 2 * 3.5  # the H100s, the H200s; the T4 unpriced
    assert value(page, "inference_cost_usd_per_hour", target="vllm-a") == 2.5
    assert value(page, "inference_cost_usd_per_hour", model=MODEL) == 2.5
    generated = value(page, "inference_generation_tokens_per_second", target="vllm-a", model=MODEL, window="1m")
    prompt = value(page, "inference_prompt_tokens_per_second", target="vllm-a", model=MODEL, window="1m")
    assert value(page, "inference_cost_usd_per_million_tokens", model=MODEL, window="1m", tokens="generated") == \
        pytest.approx(2.5 / 3600 / generated * 1e6, rel=1e-12)
    assert value(page, "inference_cost_usd_per_million_tokens", model=MODEL, window="1m", tokens="all") == \
        pytest.approx(2.5 / 3600 / (generated + prompt) * 1e6, rel=1e-12)
    # The T4 has no price: the fleet's spend is partial, so no fleet-wide $/token (never a low guess).
    assert all("model" in labels for labels in series(page, "inference_cost_usd_per_million_tokens"))
    # Steady throughput, steady spend: the $/token baseline ratio is 1 -- once the samples reach back
    # over 90 % of the 2m baseline (they start when the 1m window is full, at 60 s): not yet at 180 s.
    assert ("inference_cost_per_token_baseline_ratio", (("model", MODEL), ("window", "1m"))) not in page
    assert value(pages[16], "inference_cost_per_token_baseline_ratio", model=MODEL, window="1m") == \
        pytest.approx(1.0)


def test_idle_spend_from_the_exported_utilization(played: tuple[list[Samples], Monitor]) -> None:
    page = played[0][-1]
    utilization = [value(page, "inference_gpu_utilization_ratio", node="gpu-node-01", gpu=g)
                   for g in ("0",) if series(page, "inference_gpu_utilization_ratio", node="gpu-node-01", gpu=g)]
    assert utilization == [0.846213]  # GPU 1 is in MIG mode: no utilization, so no idle reading
    h200 = value(page, "inference_gpu_utilization_ratio", node="gpu-node-02", gpu="0")  # its GPU 1 is MIG too
    idle = 2.5 * (1 - 0.846213) + 3.5 * (1 - h200)
    assert value(page, "inference_cost_idle_usd_per_hour") == pytest.approx(idle)
    assert value(page, "inference_cost_idle_ratio") == pytest.approx(idle / (2.5 + 3.5))


def test_unknown_gpu_is_price_known_zero_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    with pages() as server, caplog.at_level(logging.WARNING, logger="monitor.cost"):
        page = run(3, server)[0][-1]
    assert value(page, "inference_cost_price_known", node="desk", gpu="0") == 0.0
    assert value(page, "inference_cost_price_known", node="gpu-node-02", gpu="1") == 1.0  # H200: a default price
    assert value(page, "inference_cost_price_known", node="gpu-node-01", gpu="0") == 1.0
    assert not series(page, "inference_cost_gpu_price_usd_per_hour", node="desk")  # no guessed price
    warnings = [r.getMessage() for r in caplog.records if "has no price" in r.getMessage()]
    assert len(warnings) == 1 and "Tesla T4" in warnings[0] and "cost.gpu_prices" in warnings[0]


def test_long_prompts_raise_the_expensive_request_ratio(played: tuple[list[Samples], Monitor]) -> None:
    pages, _ = played
    labels = {"model": MODEL, "window": "1m", "tokens": "prompt"}
    # Before: the fixture's own mix, 1 request in 1200 beyond 2 x the baseline P99 (5000 tokens).
    assert value(pages[12], "inference_cost_expensive_request_ratio", **labels) == pytest.approx(1 / 1200, abs=1e-3)
    # After: 60 of every 180 requests a scrape carry 10k-20k token prompts.
    assert value(pages[16], "inference_cost_expensive_request_ratio", **labels) == pytest.approx(60.1 / 180, abs=0.01)
    assert value(pages[16], "inference_cost_expensive_request_ratio", **{**labels, "tokens": "generated"}) < 0.01


def test_budget_and_totals(played: tuple[list[Samples], Monitor]) -> None:
    page = played[0][-1]
    spent = 12.0 * 16 * 15 / 3600
    assert value(page, "inference_cost_usd_total") == pytest.approx(spent)
    assert value(page, "inference_cost_usd_total", target="vllm-a") == pytest.approx(2.5 * 16 * 15 / 3600)
    assert value(page, "inference_cost_today_usd") == pytest.approx(spent)
    assert value(page, "inference_cost_daily_budget_usd") == 100
    assert value(page, "inference_cost_budget_used_ratio") == pytest.approx(spent / 100)


def serve_and_ask(server: PageServer) -> tuple[Any, Any, str]:
    """The real app, scheduled: /api/v1/cost, /api/v1/status and /metrics once the GPUs are priced."""
    settings = load_settings(None, {
        "service": {"scrape_interval": "1s", "targets": [
            {"name": "vllm-a", "url": server.url("/vllm"), "pod": "vllm-llama-*"},
            {"name": "far", "url": server.url("/vllm"), "node": "rack-9", "gpus": [0]}]},
        "infra": {"interval": "1s", "nvml": {"enabled": "false"},
                  "dcgm": {"targets": [{"name": "node-1", "url": server.url("/dcgm48")}]}},
        "cost": {"currency": "CNY", "cny_per_usd": 7.0,
                 "static_gpus": [{"model": "NVIDIA A100-SXM4-80GB", "count": 2, "node": "rack-9"}]},
    })
    with serve_app(Monitor(settings)) as url, httpx.Client(base_url=url, timeout=5.0, trust_env=False) as client:
        deadline = time.monotonic() + 20
        while len(client.get("/api/v1/cost").json()["inventory"]) < 4:  # the dcgm-exporter's GPUs too
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # /metrics is the page rendered at the last publish tick, which may hold an earlier cost
        # (seen beside two CPU hogs): wait, bounded, for a render with all four GPUs priced.
        while "\ninference_cost_usd_per_hour 8.0\n" not in (metrics := client.get("/metrics").text):
            assert time.monotonic() < deadline, metrics[-2000:]
            time.sleep(0.05)
        return client.get("/api/v1/cost").json(), client.get("/api/v1/status").json(), metrics


def test_cost_api_and_topology_in_status() -> None:
    with pages() as server:
        cost, status, metrics = serve_and_ask(server)
    assert cost["currency"] == "CNY"
    assert cost["spend"]["usd_per_hour"] == 2 * 2.5 + 2 * 1.5  # gpu-node-01's H100s and rack-9's A100s
    assert cost["reporting"]["usd_per_hour"] == pytest.approx(8.0 * 7.0)  # in CNY
    assert cost["by_target"] == {"vllm-a": 2.5, "far": 1.5}
    rack = [g for g in cost["inventory"] if g["node"] == "rack-9"]
    assert [(g["gpu"], g["source"], g["price"]["key"], g["targets"]) for g in rack] == [
        ("0", "static", "A100", ["far"]), ("1", "static", "A100", [])]
    assert {"key": "H100", "source": "default", "amount_per_hour": 2.5, "currency": "USD",
            "usd_per_hour": 2.5, "set": PRICES_SET} in cost["prices"]
    targets = status["topology"]["targets"]
    assert targets["vllm-a"]["mapped_by"] == "pod"
    assert targets["vllm-a"]["gpus"] == [{"node": "gpu-node-01", "gpu": "0"}]
    assert targets["far"]["gpus"] == [{"node": "rack-9", "gpu": "0"}] and targets["far"]["unseen"] == []
    assert "\ninference_cost_usd_per_hour 8.0\n" in metrics  # (what serve_and_ask waited for, bounded)
