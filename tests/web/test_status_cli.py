"""`infermon status` against a running monitor: the tables and the exit codes 0, 1 and 2."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.runtime import Monitor
from tests.support.appserver import serve_app
from tests.support.pageserver import PageServer, status_page
from tests.web.scenario import settings_for, two_targets


def wait_for(url: str, ok: bool, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        overview = httpx.get(f"{url}/api/v1/status", timeout=5, trust_env=False).json()["overview"]
        rows = overview["service"]["rows"]
        # The view is published a tick after the health book changes: wait for both.
        # ... and for every target's first scrape (a target waiting for it is no problem: ok).
        if overview["ok"] is ok and all(r.get("requests_per_second") is not None for r in rows if r["up"]) \
                and all(r["state"] != "waiting" for r in rows) \
                and (ok or any(not r["up"] for r in rows)):
            return
        time.sleep(0.2)
    raise AssertionError(f"the monitor never reported ok={ok}")


def test_status_prints_the_overview_and_exits_0_then_1_when_a_target_goes_down() -> None:
    runner = CliRunner()
    with two_targets() as server, serve_app(Monitor(settings_for(server))) as url:
        wait_for(url, ok=True)
        # On a loaded machine a scrape can time out between the two reads: ask again, boundedly.
        deadline = time.monotonic() + 20
        while (fine := runner.invoke(app, ["status", "--url", url], env={"COLUMNS": "200"})).exit_code != 0:
            assert time.monotonic() < deadline, fine.output
            time.sleep(0.5)
        server.set("/b", status_page(503))
        wait_for(url, ok=False)
        down = runner.invoke(app, ["status", "--url", url], env={"COLUMNS": "200"})
    assert fine.exit_code == 0, fine.output
    assert "vllm-a" in fine.output and "vllm-b" in fine.output and "NVIDIA H200" in fine.output
    assert "$3.50/h" in fine.output and "service: ok" in fine.output and fine.output.rstrip().endswith("OK")
    assert down.exit_code == 1, down.output
    assert "DOWN" in down.output and "service: failing" in down.output and "ATTENTION" in down.output


def test_status_exits_2_when_no_monitor_answers() -> None:
    with PageServer() as server:
        refused = server.refused_url("/")
    result = CliRunner().invoke(app, ["status", "--url", refused.rstrip("/")])
    assert result.exit_code == 2 and "cannot read the monitor's status" in result.output


def test_status_fits_80_columns_with_every_name_whole() -> None:
    runner = CliRunner()
    with two_targets() as server, serve_app(Monitor(settings_for(server))) as url:
        wait_for(url, ok=True)
        narrow = runner.invoke(app, ["status", "--url", url], env={"COLUMNS": "80"})
    lines = narrow.output.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), [line for line in lines if len(line.rstrip()) > 80]
    assert "…" not in narrow.output  # no cell cut to `tar…`
    assert "  vllm-a  up" in narrow.output and "  vllm-b  up" in narrow.output and "NVIDIA H200" in narrow.output
    assert "req/s" in narrow.output and "TTFT P50" in narrow.output and "$3.50/h" in narrow.output
    assert len(lines) < 40


def test_status_loads_no_collector_code() -> None:
    # `infermon status` only asks a monitor: importing the quality layer (scipy, openai) cost it 10 s.
    import subprocess
    import sys

    heavy = "('scipy', 'openai', 'monitor.quality.run', 'monitor.runtime')"
    probe = f"import sys, monitor.cli, monitor.web.terminal; print(sorted(m for m in {heavy} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert loaded.stdout.strip() == "[]"


def test_status_says_the_engine_facts_in_both_widths() -> None:
    """vLLM 0.33's own page, its counters growing: the prefix cache's and the drafts' ratios, with
    their baselines once the history covers them, in the wide table's notes and the narrow lines."""
    from rich.console import Console

    from monitor.config import load_settings
    from monitor.web.overview import overview
    from monitor.web.terminal import print_overview
    from tests.service.pagegen import grow
    from tests.web.test_overview import real_page

    base = real_page("vllm-0.33.0_t60.prom")
    scrapes = [0]

    def page(_: httpx.Request) -> httpx.Response:
        scrapes[0] += 1
        return httpx.Response(200, text=grow(base, 1 + 0.1 * scrapes[0]))

    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                    "service": {"windows": ["30s"], "baseline_window": "1m",
                                                "targets": [{"name": "dp", "url": "http://dp/m"}]}})
    clock = [1_767_300_000.0]
    monitor = Monitor(settings, client=httpx.AsyncClient(transport=httpx.MockTransport(page)), wall=lambda: clock[0])

    async def cycles() -> dict[str, Any]:
        try:
            for _ in range(24):  # 2 minutes: the 30 s window and the minute before it covered
                await monitor.run_once()
                clock[0] += 5.0
            return overview(monitor)
        finally:
            await monitor.aclose()

    o = asyncio.run(cycles())
    (row,) = o["service"]["rows"]
    assert row["prefix_cache_hit_ratio"] == pytest.approx(row["prefix_cache_hit_ratio_baseline"])  # all grew alike
    expected = (f"prefix cache {row['prefix_cache_hit_ratio'] * 100:.0f} % (baseline "
                f"{row['prefix_cache_hit_ratio_baseline'] * 100:.0f} %)")
    assert expected in row["facts"] and "drafts accepted" in row["facts"], row["facts"]
    for width in (80, 200):
        console = Console(width=width, record=True, color_system=None)
        print_overview(console, o, "http://monitor")
        text = console.export_text()
        assert expected in text, text
        assert all(len(line.rstrip()) <= width for line in text.splitlines())
