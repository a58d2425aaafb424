"""A golden infra /metrics page: the H200 replay (selected by infra.replay.file) plus dcgm-exporter
pages of both naming generations; regenerate with UPDATE_GOLDEN=1."""

from __future__ import annotations

import asyncio

import httpx

from monitor.catalog import CATALOG
from monitor.exporter import make_registry, render_health, render_text
from monitor.health import HealthBook
from monitor.infra.collector import InfraCollector
from monitor.infra.render import render_infra
from tests.conftest import FIXTURES
from tests.infra.conftest import infra_settings
from tests.infra.fakes import TRACE_FILE, FakeClock
from tests.support.golden import assert_golden, assert_promtool_accepts, emitted_families

GOLDEN = FIXTURES / "golden_infra.prom"
PAGES = {"dcgm-48": "sample_dcgm.prom", "dcgm-49": "dcgm_4_9.prom",  # and the GPU health rows of both:
         "dcgm-health": "dcgm_health.prom", "dcgm-v100": "dcgm_v100_health.prom"}
WALL = 1_767_300_000.0


def scenario_page() -> str:
    def handler(request: httpx.Request) -> httpx.Response:
        name = PAGES.get(request.url.host)
        if name is None:
            return httpx.Response(500, text="exporter down")
        return httpx.Response(200, text=(FIXTURES / name).read_text())

    targets = [{"name": host, "url": f"http://{host}:9400/metrics"} for host in [*PAGES, "dcgm-down"]]
    settings = infra_settings(replay={"file": str(TRACE_FILE)}, dcgm={"targets": targets})
    clock = FakeClock()

    async def run() -> str:
        client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        health = HealthBook(wall=lambda: WALL)
        collector = InfraCollector(settings.infra, client, health, wall=lambda: WALL, clock=clock)
        try:
            await collector.collect()  # opens the replay at second 0
            clock.now = 51.5  # burning at the power cap with memory filled to 93 %
            await collector.collect()
        finally:
            await collector.aclose()
            await client.aclose()
        for entry in health.entries.values():
            entry.duration_seconds = 0.01  # wall-clock measurements: pinned for a stable page
        registry = make_registry([lambda: render_infra(collector.view), lambda: render_health(health)])
        return render_text(registry).decode()

    return asyncio.run(run())


def test_golden_page_unchanged() -> None:
    assert_golden(GOLDEN, scenario_page())


def test_golden_page_passes_promtool() -> None:
    assert_promtool_accepts(GOLDEN)


def test_emitted_families_equal_the_catalog() -> None:
    emitted = emitted_families(GOLDEN)
    # prometheus_client names a counter family without its `_total`.
    emitted = {name + "_total" if f"{name}_total" in CATALOG else name for name in emitted}
    expected = {name for name, d in CATALOG.items() if d.layer in ("infra", "self")}
    # This page is made from the collectors alone; the whole Monitor's page (the service golden)
    # carries the configuration-reload gauge, the scheduled jobs' progress and the event-loop lag.
    whole_monitor = {"inference_monitor_config_last_reload_successful", "inference_monitor_job_healthy",
                     "inference_monitor_job_last_progress_timestamp_seconds", "inference_monitor_job_errors_total",
                     "inference_monitor_job_skipped_runs_total",
                     "inference_monitor_event_loop_lag_seconds"}
    assert emitted == expected - whole_monitor
