"""The overview in a real browser (Debian's Chromium under Playwright), against a running demo:
every layer's numbers as /api/v1/status and /metrics give them, nothing fetched from outside
loopback, no console errors, a phone-width layout, the quality report's charts, a target going
down turning red; and the demo's log over its first minute."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from monitor.ports import free_port
from monitor.runtime import Monitor
from monitor.web.page import gib, ms, num, pct, usd
from tests.support.appserver import serve_app
from tests.support.pageserver import status_page
from tests.support.served_process import stop
from tests.web.browser import artifacts_dir, browser_page
from tests.web.scenario import cell, row, settings_for, two_targets

pytestmark = pytest.mark.long  # a demo run in a process of its own, read in a real Chromium

DEMO_SECONDS = 150
LOG_WINDOW = 60.0
GPU_LABELS = 'node="demo-h200",gpu="0"'


@dataclass
class Demo:
    url: str
    process: subprocess.Popen[str]
    log: Path
    started: float


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    tmp = tmp_path_factory.mktemp("demo")
    port = free_port()
    env = {**os.environ, "INFERMON_STORAGE__URL": f"sqlite:///{tmp / 'demo.db'}", "PYTHONUNBUFFERED": "1"}
    env.pop("OPENAI_API_KEY", None)
    log = tmp / "demo.log"
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "demo", "--port", str(port),
                                    "--duration", str(DEMO_SECONDS)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   text=True, cwd=Path(__file__).parents[2])
    try:
        yield Demo(f"http://127.0.0.1:{port}", process, log, time.monotonic())
    finally:
        stop(process)


def overview_of(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/api/v1/status", timeout=5, trust_env=False).json()["overview"]


def all_four_layers(url: str, timeout_s: float = 90.0) -> dict[str, Any]:
    """Waits until every layer has numbers (the issue: within the demo's first minute)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            o = overview_of(url)
        except httpx.HTTPError:
            time.sleep(1)
            continue
        if (o["quality"]["rows"] and o["cost"]["configured"] and o["infra"]["rows"]
                and any(r.get("requests_per_second") for r in o["service"]["rows"])):
            return o
        time.sleep(1)
    raise AssertionError("the demo did not show all four layers in time")


def metric(text: str, name: str, labels: str) -> float:
    """The sample of `name` whose labels include all of `labels` (in any order)."""
    wanted = set(re.findall(r'\w+="[^"]*"', labels))
    for found in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
        if wanted <= set(re.findall(r'\w+="[^"]*"', found.group(1))):
            return float(found.group(2))
    raise AssertionError(f"{name}{{{labels}}} not in /metrics")


def spend_card(html: str) -> str:
    found = re.search(r'data-k="usd_per_hour">spend<b>([^<]*)</b>', html)
    assert found, "no spend card"
    return found.group(1)


def charts_filled(url: str, timeout_s: float = 30.0) -> None:
    """Two samples of every headline series: each chart draws a line."""
    deadline = time.monotonic() + timeout_s
    while any(len(c["points"]) < 2 for c in overview_of(url)["charts"]):
        assert time.monotonic() < deadline, "the charts did not fill"
        time.sleep(1)


def test_every_layer_in_the_browser_matches_status_and_metrics(demo: Demo, tmp_path: Path) -> None:
    all_four_layers(demo.url)
    charts_filled(demo.url)
    with browser_page() as (page, seen):
        before, metrics_before = overview_of(demo.url), httpx.get(f"{demo.url}/metrics", timeout=5).text
        page.goto(f"{demo.url}/", wait_until="load")
        html = page.content()
        after, metrics_after = overview_of(demo.url), httpx.get(f"{demo.url}/metrics", timeout=5).text
        shots = artifacts_dir(tmp_path)
        page.screenshot(path=str(shots / "overview.png"), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})  # a phone
        page.reload(wait_until="load")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        page.screenshot(path=str(shots / "overview-phone.png"), full_page=True)
    assert seen.console_errors == []
    outside = [u for u in seen.requests if urlsplit(u).hostname != "127.0.0.1"]
    assert outside == [] and any(u.endswith("/static/overview.css") for u in seen.requests)
    assert overflow <= 0, "the page is wider than a phone's screen"
    assert (shots / "overview.png").stat().st_size > 10_000
    charts = html.split('aria-label="last hour"', 1)[1].split("</section>", 1)[0]
    assert charts.count("<polyline") == 4 and 'id="no-data"' not in html  # four lines, none collapsed
    # The numbers of the two snapshots around the page load (a collection may fall between).
    sim = row(html, "target", "vllm-sim")
    gpu = row(html, "gpu", "demo-h200/0")
    expected = []
    for o, text in ((before, metrics_before), (after, metrics_after)):
        (s,) = [r for r in o["service"]["rows"] if r["target"] == "vllm-sim"]
        (g,) = o["infra"]["rows"]
        (q,) = o["quality"]["rows"]
        expected.append({
            "rps": num(s["requests_per_second"], 2), "ttft_p99": ms(s["ttft_p99_seconds"]),
            "tpot_p50": ms(s["tpot_p50_seconds"]), "errors": pct(s["error_ratio"], 2),
            "util": pct(metric(text, "inference_gpu_utilization_ratio", GPU_LABELS)),
            "temp": num(metric(text, "inference_gpu_temperature_celsius", GPU_LABELS), 0) + " °C",
            "mem": gib(g["memory_used_bytes"]), "score": num(q["score_mean"], 2),
            "usd_per_hour": f"{usd(o['cost']['usd_per_hour'])}/h",
            "up": metric(text, "inference_target_up", 'target="vllm-sim"'),
        })
        # The page reads the live views; /metrics is the page rendered at the last publish tick, up
        # to an infra tick behind them (beside two CPU hogs it showed 50 °C, the page 42 °C read
        # one tick later): the GPU's numbers of the live view count too.
        expected.append({**expected[-1], "util": pct(g["utilization_ratio"]),
                         "temp": num(g["temperature_celsius"], 0) + " °C"})
    shown = {"rps": cell(sim, "rps"), "ttft_p99": cell(sim, "ttft_p99"), "tpot_p50": cell(sim, "tpot_p50"),
             "errors": cell(sim, "errors"), "util": cell(gpu, "util"), "temp": cell(gpu, "temp"),
             "mem": cell(gpu, "mem").split(" / ")[0], "score": cell(row(html, "quality", q["model"]), "score"),
             "usd_per_hour": re.search(r'data-k="usd_per_hour">spend<b>([^<]*)</b>', html).group(1),  # type: ignore[union-attr]
             "up": 1.0 if sim.startswith('<tr class="up"') else 0.0}
    # Per layer: each layer collects on its own schedule, so the page may hold the service numbers
    # of the later snapshot and the GPU's of the earlier one (seen on a busy machine).
    for keys in (("rps", "ttft_p99", "tpot_p50", "errors", "up"), ("util", "temp", "mem"), ("score",),
                 ("usd_per_hour",)):
        part = {k: shown[k] for k in keys}
        assert part in [{k: e[k] for k in keys} for e in expected], (part, expected)
    for layer in ("service", "infra", "quality", "cost"):
        assert f'data-layer="{layer}" data-state="not configured"' not in html


def test_the_quality_report_page_renders_its_charts(demo: Demo) -> None:
    all_four_layers(demo.url)
    with browser_page() as (page, seen):
        # ?refresh=0: on a busy machine a reload every 5 s can come before the click lands
        page.goto(f"{demo.url}/?refresh=0", wait_until="load")
        # The link the page shows, not the one the API showed a moment before: the demo judges
        # its history days first, so yesterday's report can give way to today's in between.
        link = page.locator('a[href^="/reports/quality/"]').first
        report = link.get_attribute("href")
        assert report is not None and report.startswith("/reports/quality/20")
        link.click()
        page.wait_for_load_state("load")
        assert page.url == f"{demo.url}{report}"
        charts = page.locator("svg[role=img]")
        assert charts.count() >= 2
        assert page.locator('svg[aria-label="score histogram"] rect').count() == 5
        assert page.locator('svg[aria-label="output length distribution"] rect').count() > 0
    assert seen.console_errors == []


def test_the_demo_log_holds_no_per_job_lines(demo: Demo) -> None:
    # A minute of the demo's log, and at least until the quality alerts' first delivery (the
    # judge's run can end late on a busy machine: waited for, while the demo has 25 s left to ask it)
    time.sleep(max(0.0, LOG_WINDOW - (time.monotonic() - demo.started)))
    delivered = re.compile(r"monitor\.demo\.webhook: webhook received: firing \w+")
    deadline = demo.started + DEMO_SECONDS - 25.0
    while not delivered.search(demo.log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.5)
    text = demo.log.read_text()
    assert f"overview  {demo.url}/" in text
    logged = [line for line in text.splitlines() if re.match(r"^\d{4}-\d{2}-\d{2} ", line)]
    assert logged, text
    per_job = [line for line in logged if "apscheduler" in line or "Running job" in line or "executed successfully"
               in line or "Adding job" in line]
    assert per_job == []
    assert len(logged) < 40, "\n".join(logged)  # state changes only: tens of lines, not one per job run
    assert "Traceback" not in text
    # the quality alerts fire in the first minute: delivered to the demo's own webhook sink, shown on the page
    assert delivered.search(text), text
    sent = [t for t in overview_of(demo.url)["alerts"]["recent"] if t["deliveries"].get("demo-webhook") == "sent"]
    assert sent
    html = httpx.get(f"{demo.url}/", timeout=5).text
    assert "demo-webhook: sent" in html


def test_a_target_taken_down_turns_red_within_one_refresh() -> None:
    with two_targets() as server:
        monitor = Monitor(settings_for(server, gpus=False))
        with serve_app(monitor) as url, browser_page() as (page, seen):
            page.goto(f"{url}/", wait_until="load")
            page.wait_for_selector('tr.up[data-target="vllm-b"]', timeout=15_000)
            server.set("/b", status_page(500))
            taken_down = time.monotonic()
            # The page refreshes itself (no JavaScript) every scrape interval, 5 s at least.
            page.wait_for_selector('tr.down[data-target="vllm-b"]', timeout=20_000)
            waited = time.monotonic() - taken_down
            layer = page.get_attribute('a[data-layer="service"]', "data-state")
        assert layer == "failing" and seen.console_errors == []
    print(f"row red after {waited:.1f} s")
