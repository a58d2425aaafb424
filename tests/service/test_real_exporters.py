"""Engines behind the current prometheus_client, scraped over loopback with the monitor's Accept.

prometheus_client (0.23 .. 0.26 at least) answers any Accept that lists OpenMetrics with
OpenMetrics in `escaping=underscores`: sample lines read `vllm_num_requests_running` while the
# TYPE lines keep `vllm:` (its issue #1177). Such engines were marked down. Here the same registry
is served five ways -- prometheus_client's start_http_server, its make_asgi_app, its OpenMetrics
writer with that escaping (the page any client asking for OpenMetrics gets), its text writer, and
that text behind KServe's `kserve_` prefix -- and every way must give the same, correct numbers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import generate_latest, make_asgi_app, start_http_server
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics import exposition as openmetrics

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.scrape import ACCEPT
from monitor.service.promql import histogram_quantile
from tests.service.exporters import LATENCY_BUCKETS, MODEL, FakeEngine, prefixed
from tests.support.appserver import serve_asgi
from tests.support.pageserver import OPENMETRICS, Generated, PageServer
from tests.support.promql_oracle import extrapolated_increase

SCRAPES = 5
INTERVAL = 15.0


@contextmanager
def served(engine: FakeEngine) -> Iterator[list[dict[str, str]]]:
    """The registry behind five URLs; yields the monitor's target list for them."""
    with ExitStack() as stack:
        httpd, thread = start_http_server(0, addr="127.0.0.1", registry=engine.registry)
        stack.callback(thread.join, 5)
        stack.callback(httpd.server_close)
        stack.callback(httpd.shutdown)
        api = FastAPI()  # mounted as vLLM mounts it on its OpenAI server
        api.mount("/metrics", make_asgi_app(engine.registry))
        asgi = stack.enter_context(serve_asgi(api))
        pages = stack.enter_context(PageServer())
        pages.set("/om", Generated(lambda _: openmetrics.generate_latest(engine.registry), OPENMETRICS))
        pages.set("/text", Generated(lambda _: generate_latest(engine.registry)))
        pages.set("/kserve", Generated(lambda _: prefixed(generate_latest(engine.registry).decode(), "kserve_")))
        yield [
            {"name": "client-http", "url": f"http://127.0.0.1:{httpd.server_port}/metrics"},
            {"name": "client-asgi", "url": f"{asgi}/metrics"},
            {"name": "openmetrics-underscores", "url": pages.url("/om")},
            {"name": "text", "url": pages.url("/text")},
            {"name": "kserve", "url": pages.url("/kserve"), "metric_prefix": "kserve_"},
        ]


def run(targets: list[dict[str, str]], engine: FakeEngine) -> tuple[Monitor, list[float]]:
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
        "scrape_interval": "15s", "windows": ["1m"], "targets": targets}})
    clock = [1_767_300_000.0]
    times: list[float] = []

    async def scrape_all() -> Monitor:
        monitor = Monitor(settings, wall=lambda: clock[0])
        for _ in range(SCRAPES):
            engine.step()
            times.append(clock[0])
            await monitor.service.collect()
            clock[0] += INTERVAL
        clock[0] -= INTERVAL
        monitor.service.view = monitor.service.derive(clock[0])
        await monitor.aclose()
        return monitor

    return asyncio.run(scrape_all()), times


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_every_spelling_is_up_with_the_same_right_numbers(kind: str) -> None:
    engine = FakeEngine(kind)
    with served(engine) as targets:
        monitor, times = run(targets, engine)
    rows = {row["name"]: row for row in monitor.service.status()}
    for name, row in rows.items():
        assert row["up"], (name, row["error"])
        assert row["engine"] == kind and row["models"] == [MODEL], name
    views = monitor.service.view.targets
    reference = views["text"]
    assert reference.gauges["running"] == {MODEL: 4 + SCRAPES}
    assert reference.gauges["kv_cache"] == {MODEL: pytest.approx(0.25 + 0.05 * SCRAPES)}
    stats = reference.stats[(MODEL, "1m")]
    # References: PromQL's own functions over the values each series really had at each scrape.
    # (-45 s, +15 s]: the last four scrapes are inside the 1m window, the first is not.
    end = times[-1]
    inside = [(t, 20.0 * (i + 1)) for i, t in enumerate(times) if t > end - 60]
    expected_rps = extrapolated_increase(inside, end - 60, end) / 60  # type: ignore[operator]
    assert stats.requests_per_second == pytest.approx(expected_rps, rel=1e-12)
    buckets = []
    for bound in (*LATENCY_BUCKETS, float("inf")):
        fast = sum(1 for i in range(20) if i % 10 != 9 and 0.04 + 0.002 * i <= bound)  # as FakeEngine.step
        per_step = fast + (2 if bound >= 0.6 else 0)
        points = [(t, float(per_step * (i + 1))) for i, t in enumerate(times) if t > end - 60]
        buckets.append((bound, extrapolated_increase(points, end - 60, end) or 0.0))
    assert stats.quantiles["ttft"][0.99] == pytest.approx(histogram_quantile(0.99, buckets), rel=1e-12)
    assert 0.04 < stats.quantiles["ttft"][0.5] < 0.1
    for name, view in views.items():
        assert view.gauges == reference.gauges, name
        assert view.stats == reference.stats, name


def test_our_accept_keeps_the_colons_in_prometheus_client() -> None:
    # The measurement behind ACCEPT: with this header the current release answers with the text
    # format, whose sample names keep their colons (OpenMetrics would escape them).
    engine = FakeEngine("vllm")
    engine.step()
    encode, content_type = choose_encoder(ACCEPT)
    page = encode(engine.registry).decode()
    assert content_type.startswith("text/plain") and "version=0.0.4" in content_type
    assert "\nvllm:num_requests_running{" in page


def test_live_servers_answer_our_accept_with_colons() -> None:
    engine = FakeEngine("sglang")
    engine.step()
    with served(engine) as targets, httpx.Client(follow_redirects=True) as client:
        for target in targets[:2]:  # prometheus_client's own servers
            response = client.get(target["url"], headers={"Accept": ACCEPT})
            assert response.headers["content-type"].startswith("text/plain"), target
            assert "\nsglang:num_running_reqs{" in response.text, target


def test_prefix_is_suggested_when_names_hide_behind_one() -> None:
    engine = FakeEngine("vllm")
    with served(engine) as targets:
        kserve = {**targets[-1]}
        kserve.pop("metric_prefix")
        monitor, _ = run([kserve], engine)
    (row,) = monitor.service.status()
    assert row["up"] is True and row["state"] == "unrecognized"  # the page answered: up, engine unrecognised
    assert "set metric_prefix: kserve_" in str(row["error"])
