"""The overview model and the page at / on real pages, rendered through the real app."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from monitor import aio
from monitor.config import load_settings
from monitor.quality.layer import ModelResult, QualityView
from monitor.quality.summary import QualitySummary
from monitor.runtime import Monitor
from monitor.web import overview as overview_module
from monitor.web.overview import quality_rows, service_rows
from monitor.web.page import environment, gib, ms, num, pct, render_page, usd
from monitor.web.terminal import print_overview
from tests.service.test_real_engine_pages import page as real_page
from tests.support.appserver import serve_app
from tests.support.pageserver import status_page
from tests.support.turns import counting_turns
from tests.web.scenario import cell, row, rules_file, settings_for, two_targets


def collected(monitor: Monitor, cycles: int = 4, step: float = 5.0) -> None:
    clock = [1_767_300_000.0]
    monitor.wall = lambda: clock[0]

    async def run() -> None:
        for _ in range(cycles):
            await monitor.run_once()
            clock[0] += step

    asyncio.run(run())


def page_of(monitor: Monitor) -> str:
    return render_page(environment().get_template("overview.html"), monitor)


def test_every_section_shows_the_numbers_of_the_views() -> None:
    with two_targets() as server:
        monitor = Monitor(settings_for(server))
        collected(monitor)
        overview = monitor.status()["overview"]
        html = page_of(monitor)
        asyncio.run(monitor.aclose())
    assert overview["ok"] and {layer["state"] for layer in overview["layers"].values()} == {"ok", "not configured"}
    assert overview["layers"]["quality"]["state"] == "not configured"
    stats = monitor.service.view.targets["vllm-b"].stats
    (model,) = {m for m, _ in stats}
    b = stats[(model, "30s")]
    b_row = row(html, "target", "vllm-b")
    assert cell(b_row, "rps") == num(b.requests_per_second, 2) and b.requests_per_second
    assert cell(b_row, "ttft_p99") == ms(b.quantiles["ttft"][0.99])
    assert cell(b_row, "tpot_p50") == ms(b.quantiles["tpot"][0.5])
    assert cell(b_row, "errors") == pct(b.error_ratio, 2)
    fleet = monitor.service.view.fleet[(model, "30s")]
    assert cell(row(html, "fleet", model), "rps") == num(fleet.requests_per_second, 2)
    assert fleet.requests_per_second and fleet.requests_per_second > b.requests_per_second
    gpu = monitor.infra.view.gpus[0]
    assert gpu.reading is not None
    g_row = row(html, "gpu", "n1/0")
    assert cell(g_row, "util") == pct(gpu.reading.utilization_ratio)
    assert cell(g_row, "mem").startswith(gib(gpu.reading.memory_used_bytes))
    assert cell(g_row, "power") == f"{num(gpu.reading.power_watts, 0)} / {num(gpu.reading.power_limit_watts, 0)} W"
    assert f"{usd(monitor.cost.view.numbers.usd_per_hour)}/h" in html and monitor.cost.view.numbers.usd_per_hour == 3.5
    # the charts: one sample per cycle of each headline series
    charts = {c["key"]: c["points"] for c in overview["charts"]}
    assert len(charts["requests_per_second"]) == 3  # rates from the second cycle on
    assert len(charts["usd_per_hour"]) == 4 and charts["usd_per_hour"][-1][1] == 3.5
    assert html.count("<polyline") == 4
    assert "http://" not in re.sub(r'href="/[^"]*"', "", html.split("<body>")[0])  # nothing from outside


def test_a_target_down_turns_its_row_red_and_its_layer_failing() -> None:
    with two_targets() as server:
        monitor = Monitor(settings_for(server, gpus=False))
        collected(monitor, cycles=2)
        server.set("/b", status_page(500))
        collected(monitor, cycles=1)
        overview = monitor.status()["overview"]
        html = page_of(monitor)
        asyncio.run(monitor.aclose())
    assert row(html, "target", "vllm-b").startswith('<tr class="down"')
    assert row(html, "target", "vllm-a").startswith('<tr class="up"')
    service = overview["layers"]["service"]
    assert service["state"] == "failing" and "vllm-b" in service["detail"] and not overview["ok"]
    assert 'data-layer="service" data-state="failing"' in html
    assert any(e["target"] == "vllm-b" and e["state"] == "down" for e in overview["events"])
    assert re.search(r"service/vllm-b\s*<b class=\"bad\">down</b>", html)


def alerting_overview(rules: Path) -> tuple[dict[str, Any], str]:
    """The overview and the page of two targets, two cycles in, evaluating `rules`."""
    with two_targets() as server:
        monitor = Monitor(settings_for(server, {"alerting": {"enabled": True, "rules_files": [str(rules)]}},
                                       gpus=False))
        collected(monitor, cycles=2)
        overview = monitor.status()["overview"]
        html = page_of(monitor)
        asyncio.run(monitor.aclose())
    return overview, html


def test_a_firing_alert_shows_its_probable_cause_and_fires_its_layer(tmp_path: Path) -> None:
    overview, html = alerting_overview(rules_file(tmp_path))
    assert overview["layers"]["service"]["state"] == "firing" and not overview["ok"]
    firing = [a for a in overview["alerts"]["active"] if a["state"] == "firing"]
    assert {a["labels"]["target"] for a in firing} == {"vllm-a", "vllm-b"}
    assert firing[0]["probable_cause"] == "the test made it so <b>on purpose</b>"
    # shown next to the alert, escaped
    assert "probable cause: the test made it so &lt;b&gt;on purpose&lt;/b&gt;" in html
    assert 'data-alert="TargetUpForTest"' in html
    # something fires: the alerts lead the page, before the charts and the tables, with what to do
    assert html.index('id="alerts"') < html.index('class="charts"') < html.index('id="service"')
    assert html.count('id="alerts"') == 1
    assert "vllm-a answers its scrapes" in html
    assert '<a href="https://runbooks.example/TargetUpForTest">' in html


def test_a_bare_monitor_says_what_is_not_configured() -> None:
    monitor = Monitor(load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False}}))
    collected(monitor, cycles=1)
    overview = monitor.status()["overview"]
    html = page_of(monitor)
    asyncio.run(monitor.aclose())
    assert overview["ok"] and all(layer["state"] == "not configured" for layer in overview["layers"].values())
    assert "No service targets" in html and "No GPUs" in html and "No data yet" in html


def test_the_app_serves_the_page_and_its_stylesheet() -> None:
    with two_targets() as server:
        monitor = Monitor(settings_for(server, gpus=False))
        with serve_app(monitor) as url, httpx.Client(base_url=url, timeout=10, trust_env=False) as client:
            page = client.get("/")
            css = client.get("/static/overview.css")
            still, slow, floor, bad = (client.get("/", params={"refresh": v}) for v in ("0", "60", "1", "soon"))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<meta http-equiv="refresh" content="5">' in page.text and 'href="/static/overview.css"' in page.text
    # the reader's choice: no reload at all (to read, to follow a link), a slower one, never under 5 s
    assert still.status_code == 200 and 'http-equiv="refresh"' not in still.text and "not refreshing" in still.text
    assert '<meta http-equiv="refresh" content="60">' in slow.text and 'content="5">' in floor.text
    assert bad.status_code == 422 and "refresh" in bad.text
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css") and ".pill" in css.text


def test_quality_rows_take_the_last_run_per_model_and_link_its_report() -> None:
    summary = {"samples": 100, "score_mean": 3.2, "score_histogram": {"1": 5, "3": 20, "5": 75},
               "refusal_ratio": 0.02, "hallucination_ratio": 0.07, "psi": 0.31, "output_length_mean_change_ratio": -0.4}
    rows = quality_rows(QualityView({"m": ModelResult("2026-11-30", 1.0, QualitySummary.from_json(summary))}, 0.5,
                                     loaded=True))
    (q,) = rows["rows"]
    assert q["histogram"] == [5, 0, 20, 0, 75] and q["report"] == "/reports/quality/2026-11-30"
    assert q["score_mean"] == 3.2 and q["psi"] == 0.31 and q["length_change_ratio"] == -0.4


def test_a_vllm_033_row_says_its_ranks_waiting_reasons_sleep_and_lora() -> None:
    """The page vLLM 0.33's own code wrote, one engine put to sleep: the row and the API say what
    the target's sums hide."""
    text = real_page("vllm-0.33.0_t60.prom").replace(
        'engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="awake"} 1.0',
        'engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="awake"} 0.0').replace(
        'engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="discard_all"} 0.0',
        'engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct",sleep_state="discard_all"} 1.0')
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                    "service": {"windows": ["30s"], "targets": [{"name": "dp", "url": "http://dp/m"}]}})
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: httpx.Response(200, text=text)))
    monitor = Monitor(settings, client=client)
    collected(monitor, cycles=2)
    html = page_of(monitor)
    (api_row,) = service_rows(monitor.service.view, True)["rows"]
    asyncio.run(monitor.aclose())
    assert api_row["ranks"] == 2 and api_row["rank_imbalance_ratio"] == 16 / 13
    assert api_row["waiting_by_reason"] == {"capacity": 5.0, "deferred": 1.0}
    assert api_row["engines_sleeping"] == 1
    assert api_row["lora"] == {"running": ["sql-lora"], "waiting": [], "max": 4}
    assert cell(row(html, "target", "dp"), "facts") == (
        "2 ranks, busiest 1.23x the mean · waiting: 5 capacity, 1 deferred · 1 engine(s) asleep · "
        "LoRA 1 running, 0 waiting of 4")


def test_more_active_alerts_than_the_page_lists_are_counted_firing_first(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # At 1,000 ten-model targets 20,000 alerts can be active: the overview lists SHOWN_ALERTS of them,
    # firing first, counts them all, and points to the alerts API for the rest.
    monkeypatch.setattr(overview_module, "SHOWN_ALERTS", 3)
    rules = rules_file(tmp_path)
    rules.write_text(rules.read_text() + """      - alert: AWaitingForTest
        expr: inference_target_up > 0
        for: 1h
        labels: {severity: warning, layer: infra}
        annotations: {summary: "{{ $labels.target }} waits"}
""")
    overview, html = alerting_overview(rules)
    alerts = overview["alerts"]
    assert (alerts["firing"], alerts["pending"]) == (2, 2)
    # firing first although "AWaitingForTest" sorts before "TargetUpForTest" by name
    assert [(a["name"], a["state"]) for a in alerts["active"]] == [
        ("TargetUpForTest", "firing"), ("TargetUpForTest", "firing"), ("AWaitingForTest", "pending")]
    # the layers read the totals: the service layer fires; a pending alert fires no layer
    assert overview["layers"]["service"]["state"] == "firing" and overview["layers"]["infra"]["state"] != "firing"
    assert "2 firing, 2 pending" in html and html.count("data-alert=") == 3
    assert 'The first 3 of 4, firing first: every one at <a href="/api/v1/alerts">' in html
    console = Console(record=True, width=200)
    print_overview(console, overview, "http://monitor")
    assert "Alerts (2 firing, 2 pending; the first 3, firing first: all at /api/v1/alerts)" in console.export_text()


def test_the_page_lists_every_alert_when_they_fit(tmp_path: Path) -> None:
    overview, html = alerting_overview(rules_file(tmp_path))
    assert len(overview["alerts"]["active"]) == overview["alerts"]["firing"] == 2
    assert "2 firing, 0 pending" in html and "The first" not in html
    console = Console(record=True, width=200)
    print_overview(console, overview, "http://monitor")
    assert "Alerts (2 firing, 0 pending)" in console.export_text()


def test_the_status_made_in_turns_is_the_status_and_lets_the_loop_in(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # GET /api/v1/status makes its target rows and the overview's service rows on the loop in turns
    # (at 1,000 ten-model targets they held the loop ~0.5 s): the same status, the loop let in.
    monkeypatch.setattr(aio, "SLICE_S", 0.0)  # a turn after every target
    with two_targets() as server:
        settings = settings_for(server, {"alerting": {"enabled": True, "rules_files": [str(rules_file(tmp_path))]}})
        monitor = Monitor(settings)
        collected(monitor, cycles=3)

        status, turns = asyncio.run(counting_turns(monitor.status_in_turns()))
        expected = monitor.status()
        asyncio.run(monitor.aclose())
    assert status == expected
    assert len(status["overview"]["service"]["rows"]) == 2 and len(status["layers"]["service"]["targets"]) == 2
    assert turns >= 4  # two target rows, then two targets' service rows


def test_alerts_are_listed_firing_first_then_by_severity_then_oldest_first(tmp_path: Path) -> None:
    # At minute 4 of a demo the critical TTFTP99High came third, below two warnings whose names sort
    # first. The order: firing before pending, then critical, warning, info, then the longest firing
    # first (the first alert of a cascade is likeliest its cause, and a row keeps its place as
    # others fire). The names below sort the other way round on purpose.
    path = tmp_path / "order.yml"
    alerts = [("AInfoOld", "info", "0s"), ("AWarningNew", "warning", "5s"), ("CriticalNew", "critical", "5s"),
              ("ZWarningOld", "warning", "0s"), ("BCriticalPending", "critical", "1h")]
    path.write_text("groups:\n  - name: order\n    rules:\n" + "".join(
        f"""      - alert: {name}
        expr: inference_target_up{{target="vllm-a"}} > 0
        for: {wait}
        labels: {{severity: {severity}, layer: service}}
        annotations: {{summary: "{name}"}}
""" for name, severity, wait in alerts))
    with two_targets() as server:
        monitor = Monitor(settings_for(server, {"alerting": {"enabled": True, "rules_files": [str(path)]}},
                                       gpus=False))
        collected(monitor, cycles=3)
        overview = monitor.status()["overview"]
        assert monitor.alerting is not None
        api = asyncio.run(monitor.alerting.active_in_turns())  # GET /api/v1/alerts' "active"
        html = page_of(monitor)
        asyncio.run(monitor.aclose())
    expected = ["CriticalNew", "ZWarningOld", "AWarningNew", "AInfoOld", "BCriticalPending"]
    assert [a["name"] for a in overview["alerts"]["active"]] == expected
    assert [a["labels"]["alertname"] for a in api] == expected
    assert re.findall(r'data-alert="(\w+)"', html) == expected
    console = Console(record=True, width=200)
    print_overview(console, overview, "http://monitor")
    text = console.export_text()
    listed = text[text.index("Alerts ("):]  # (the layers' line above names them sorted)
    assert sorted(expected, key=listed.index) == expected
