"""A page that answers but is no engine's is up, engine unrecognised -- never DOWN, never TargetDown.

The unknown page is a real prometheus_client registry (process and python families, what any
Python service's default registry holds) served by prometheus_client's own HTTP server over
loopback, beside the vLLM V1 fixture page. A target may pin its engine; a target not scraped yet
is waiting for its first scrape.
"""

from __future__ import annotations

import asyncio
import io
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
    start_http_server,
)
from rich.console import Console

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.service.discovery import DiscoveryError, parse_target_groups
from monitor.settings_check import load_checked_settings
from monitor.web.overview import overview
from monitor.web.page import environment, render_page
from monitor.web.terminal import print_overview
from tests.alerting.test_evaluator import RecordingSink
from tests.conftest import FIXTURES
from tests.support.pageserver import Page, PageServer
from tests.test_cli import env, infermon

VLLM_PAGE = (FIXTURES / "sample_vllm_v1.prom").read_text()
KNOWN = "vLLM / SGLang / TGI / llama.cpp / Dynamo / GAIE EPP"  # every engine table, in its order
START, STEP = 1_767_300_000.0, 15.0


def python_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


@pytest.fixture
def app_url() -> Iterator[tuple[str, int]]:
    """A Python service's own /metrics (no engine) and how many families its page holds."""
    registry = python_registry()
    families = len(re.findall(r"(?m)^# TYPE ", generate_latest(registry).decode()))
    httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/metrics", families
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def vllm_url() -> Iterator[str]:
    with PageServer() as server:
        server.set("/metrics", Page(VLLM_PAGE))
        yield server.url("/metrics")


@contextmanager
def monitoring(targets: list[dict[str, Any]], clock: list[float], sink: RecordingSink | None = None,
               ) -> Iterator[Monitor]:
    """A monitor, closed after the test has read everything (status reads the store)."""
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}},
                                    "alerting": {"enabled": sink is not None, "evaluation_interval": "15s"},
                                    "service": {"targets": targets}})
    monitor = Monitor(settings, wall=lambda: clock[0], sink=sink)  # type: ignore[arg-type]
    try:
        yield monitor
    finally:
        asyncio.run(monitor.aclose())


def cycles(monitor: Monitor, clock: list[float], count: int) -> None:
    async def run() -> None:
        for _ in range(count):
            await monitor.run_once()
            clock[0] += STEP

    asyncio.run(run())


def row(monitor: Monitor, name: str) -> dict[str, Any]:
    return next(r for r in monitor.service.status() if r["name"] == name)


def test_unrecognised_page_is_up_with_its_own_state_and_a_warning(app_url: tuple[str, int], vllm_url: str,
                                                                  store_url: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERMON_STORAGE__URL", store_url)
    url, families = app_url
    clock, sink = [START], RecordingSink()
    with monitoring([{"name": "app", "url": url}, {"name": "vllm-a", "url": vllm_url}], clock, sink) as monitor:
        cycles(monitor, clock, 10)  # 0 .. 135 s: past the warning's 2 minutes

        text = monitor.metrics_text().decode().splitlines()
        assert 'inference_target_up{target="app"} 1.0' in text
        assert 'inference_target_engine_recognized{target="app"} 0.0' in text
        assert 'inference_target_engine_recognized{target="vllm-a"} 1.0' in text
        assert not [line for line in text if 'target="app"' in line and line.startswith("inference_requests")]
        app = row(monitor, "app")
        assert app["up"] is True and app["state"] == "unrecognized" and app["engine_recognized"] is False
        assert app["error"] == (f"reachable, {families} families (process_*, python_*), "
                                f"none of {KNOWN}; set `engine:` or `metric_prefix:`")
        assert row(monitor, "vllm-a")["state"] == "up"
        # A warning of its own; the page answers, so TargetDown never fires.
        fired = [(a.name, a.status, a.labels["severity"]) for a in sink.sent]
        assert fired == [("TargetEngineUnrecognized", "firing", "warning")]
        assert sink.sent[0].labels["target"] == "app"

        view = overview(monitor)
        [app_row] = [r for r in view["service"]["rows"] if r["target"] == "app"]
        assert app_row["state"] == "unrecognized" and app_row["up"] is True and app_row["detail"] == app["error"]
        assert view["layers"]["service"]["state"] == "firing"  # the warning is firing
        [api_row] = [r for r in monitor.status()["layers"]["service"]["targets"] if r["name"] == "app"]
        assert api_row["state"] == "unrecognized" and api_row["engine_recognized"] is False


def test_layer_and_terminal_say_what_was_found(app_url: tuple[str, int]) -> None:
    url, _ = app_url
    clock = [START]
    with monitoring([{"name": "app", "url": url}], clock) as monitor:
        cycles(monitor, clock, 1)
        view = overview(monitor)
        layer = view["layers"]["service"]
        assert layer["state"] == "failing" and not view["ok"]
        assert layer["detail"].startswith("app engine not recognised: reachable, ")
        out = io.StringIO()
        print_overview(Console(file=out, width=400), view, "http://monitor")
        printed = out.getvalue()
        assert "engine not recognised" in printed and f"none of {KNOWN}" in printed
        assert "DOWN" not in printed


def test_pinned_engine_names_the_families_expected_and_missing(app_url: tuple[str, int], vllm_url: str) -> None:
    url, families = app_url
    clock = [START]
    with monitoring([
            {"name": "app", "url": url, "engine": "vllm"},
            {"name": "not-sglang", "url": vllm_url, "engine": "sglang"},
            {"name": "vllm-a", "url": vllm_url, "engine": "vllm"},
        ], clock) as monitor:
        cycles(monitor, clock, 2)
        app = row(monitor, "app")
        assert app["state"] == "unrecognized" and app["engine_pinned"] == "vllm"
        assert app["error"].startswith(
            f"reachable, {families} families (process_*, python_*), but not the pinned engine vLLM: "
            "expected vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc, missing; 0 of its ")
        sglang = row(monitor, "not-sglang")
        assert "but not the pinned engine SGLang: expected sglang:num_running_reqs or " in sglang["error"]
        assert sglang["error"].endswith("; the page looks like vLLM")
        assert row(monitor, "vllm-a")["state"] == "up" and row(monitor, "vllm-a")["engine"] == "vllm"


def test_a_pinned_engine_must_be_one_the_monitor_knows() -> None:
    with pytest.raises(Exception, match=r"service\.targets\.0\.engine: unknown engine: one of vllm, sglang, tgi"):
        load_checked_settings(None, {"service": {"targets": [
            {"name": "a", "url": "http://a/metrics", "engine": "vlm"}]}})
    [target] = parse_target_groups('[{"targets": ["10.0.0.5:8000"], "labels": {"engine": "sglang"}}]', "sd.json")
    assert target.engine == "sglang"
    with pytest.raises(DiscoveryError, match="unknown engine: one of"):
        parse_target_groups('[{"targets": ["10.0.0.5:8000"], "labels": {"engine": "llama"}}]', "sd.json")


def test_json_body_is_down_not_unrecognised() -> None:
    with PageServer() as server:
        server.set("/json", Page('{"object": "error"}\n', content_type="application/json"))
        clock = [START]
        with monitoring([{"name": "api", "url": server.url("/json")}], clock) as monitor:
            cycles(monitor, clock, 1)
    api = row(monitor, "api")
    assert api["state"] == "down" and api["error"].startswith("not Prometheus text: the body is JSON")
    assert 'inference_target_up{target="api"} 0.0' in monitor.metrics_text().decode()


def test_before_the_first_scrape_a_target_is_waiting_not_down() -> None:
    with monitoring([{"name": "vllm-a", "url": "http://127.0.0.1:9/metrics"}], [START]) as monitor:
        assert row(monitor, "vllm-a")["state"] == "waiting"
        assert "inference_target_up{" not in monitor.metrics_text().decode()  # as Prometheus: no `up` yet
        view = overview(monitor)
        [waiting] = view["service"]["rows"]
        assert waiting["state"] == "waiting" and waiting["up"] is None
        assert view["layers"]["service"] == {"state": "ok", "detail": "vllm-a waiting for the first scrape"}
        out = io.StringIO()
        print_overview(Console(file=out, width=300), view, "http://monitor")
        assert "waiting for the first scrape" in out.getvalue() and "DOWN" not in out.getvalue()


def test_check_says_what_was_found(app_url: tuple[str, int], tmp_path: Path) -> None:
    url, families = app_url
    config = tmp_path / "check.yaml"
    config.write_text(f"infra: {{nvml: {{enabled: 'false'}}}}\nservice:\n  targets: [{{name: app, url: '{url}'}}]\n")
    result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                            env=env(tmp_path), timeout=60, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert (f"engine not recognised: reachable, {families} families (process_*, python_*), "
            f"none of {KNOWN}; set `engine:` or `metric_prefix:`") in result.stdout
    assert "DOWN" not in result.stdout


def test_page_shows_the_states(app_url: tuple[str, int]) -> None:
    url, _ = app_url
    clock = [START]
    with monitoring([{"name": "app", "url": url}, {"name": "later", "url": "http://127.0.0.1:9/m"}], clock) as monitor:

        async def scrape_app_only() -> None:
            await monitor.service.scrape(monitor.service.targets["app"])
            monitor.service.view = monitor.service.derive(clock[0])

        asyncio.run(scrape_app_only())
        html = render_page(environment().get_template("overview.html"), monitor)
        assert 'data-state="unrecognized"' in html and "engine not recognised" in html
        assert 'data-state="waiting"' in html and "waiting for the first scrape" in html
        assert "DOWN" not in html
