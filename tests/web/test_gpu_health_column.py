"""The GPU rows' health column: the overview page, its JSON and `infermon status` (both widths),
on a real dcgm-exporter page with sick and healthy GPUs served from loopback."""

from __future__ import annotations

import asyncio

from rich.console import Console

from monitor.config import load_settings
from monitor.infra.ledger import gpu_health
from monitor.infra.reading import GpuReading, GpuState
from monitor.runtime import Monitor
from monitor.web.page import environment, render_page
from monitor.web.terminal import print_overview
from tests.conftest import FIXTURES
from tests.support.pageserver import Page, PageServer
from tests.web.scenario import cell, row


def test_sick_gpus_say_what_ails_them_and_healthy_ones_say_ok() -> None:
    with PageServer() as server:
        server.set("/dcgm", Page((FIXTURES / "dcgm_health.prom").read_text()))
        monitor = Monitor(load_settings(None, {"infra": {"nvml": {"enabled": "false"}, "dcgm": {"targets": [
            {"name": "h100", "url": server.url("/dcgm")}]}}}))

        async def collect() -> None:
            try:
                await monitor.run_once()
            finally:
                await monitor.aclose()

        asyncio.run(collect())
        overview = monitor.status()["overview"]
        html = render_page(environment().get_template("overview.html"), monitor)
    rows = {r["gpu"]: r for r in overview["infra"]["rows"]}
    assert (rows["0"]["health"], rows["0"]["health_reasons"]) == (
        "critical", ["XID 48", "uncorrectable ECC errors", "row remap pending"])
    assert (rows["1"]["health"], rows["1"]["health_reasons"]) == ("critical", ["row remap failed"])
    # GPU 2's XID 13 is an application's fault; a few PCIe replays since boot are no rate.
    assert (rows["2"]["health"], rows["3"]["health"]) == ("ok", "ok")
    assert cell(row(html, "gpu", "gpu-node-07/1"), "health") == "critical: row remap failed"
    assert cell(row(html, "gpu", "gpu-node-07/3"), "health") == "ok"
    for width in (200, 80):
        console = Console(width=width, record=True)
        print_overview(console, overview, "http://monitor")
        text = console.export_text()
        assert "row remap failed" in text and "XID 48" in text, text


def test_a_source_without_health_fields_shows_unknown_not_ok() -> None:
    assert gpu_health(GpuState("n", "0", "nvml", True, reading=GpuReading(temperature_celsius=40.0))) is None
    assert gpu_health(GpuState("n", "0", "nvml", True, reading=GpuReading(row_remap_pending=0.0))) == ("ok", ())
