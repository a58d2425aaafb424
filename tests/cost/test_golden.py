"""A golden cost /metrics page for a fixed scenario (regenerate with UPDATE_GOLDEN=1), linted by promtool."""

from __future__ import annotations

import asyncio

import httpx

from monitor.catalog import CATALOG
from monitor.config import load_settings
from monitor.cost.render import render_cost
from monitor.exporter import make_registry, render_text
from monitor.runtime import Monitor
from tests.conftest import FIXTURES
from tests.service.pagegen import grow
from tests.support.golden import assert_golden, assert_promtool_accepts, emitted_families

GOLDEN = FIXTURES / "golden_cost.prom"
VLLM = (FIXTURES / "sample_vllm_v1.prom").read_text()
DCGM = (FIXTURES / "sample_dcgm.prom").read_text()


def scenario_page() -> str:
    scrapes = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "dcgm":
            return httpx.Response(200, text=DCGM)
        scrapes[0] += 1
        return httpx.Response(200, text=grow(VLLM, 1 + 0.1 * scrapes[0] * (1 + (scrapes[0] > 9))))

    settings = load_settings(None, {
        "service": {"windows": ["30s"], "baseline_window": "1m", "targets": [
            {"name": "vllm-a", "url": "http://vllm/metrics", "pod": "vllm-llama-*"}]},
        "infra": {"nvml": {"enabled": "false"}, "dcgm": {"targets": [{"name": "node-1", "url": "http://dcgm/metrics"}]}},
        "cost": {"daily_budget_usd": 100, "cny_per_usd": 7.1, "gpu_prices": {"Ascend 910C": {"cny_per_hour": 10}},
                 "static_gpus": [{"model": "Ascend 910C", "count": 2, "node": "rack-cn"},
                                 {"model": "NVIDIA GeForce RTX 4090", "count": 1, "node": "desk"}]},
    })
    clock = [1_767_300_000.0]

    async def run() -> str:
        monitor = Monitor(settings, client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
                          wall=lambda: clock[0])
        for _ in range(12):
            await monitor.run_once()
            clock[0] += 15.0
        await monitor.aclose()
        return render_text(make_registry([lambda: render_cost(monitor.cost.view)])).decode()

    return asyncio.run(run())


def test_golden_page_unchanged() -> None:
    assert_golden(GOLDEN, scenario_page())


def test_golden_page_passes_promtool() -> None:
    assert_promtool_accepts(GOLDEN)


def test_emitted_families_equal_the_catalog() -> None:
    emitted = emitted_families(GOLDEN)
    emitted = {name + "_total" if f"{name}_total" in CATALOG else name for name in emitted}
    assert emitted == {name for name, d in CATALOG.items() if d.layer == "cost"}
