"""Each target on its own cadence: spread offsets, never two scrapes of one target at once, lag and
staleness said out loud, derivation after each target's own scrape equal to deriving all at once,
/metrics from the background render equal to a fresh render, /healthz answering under 200 targets."""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from monitor import exporter
from monitor.alerting.context import _target_facts
from monitor.alerting.embedded import STALE_METRIC, stale_targets
from monitor.alerting.readback import exposition_samples
from monitor.config import Duration, ServiceSettings, Settings, load_settings
from monitor.exporter import TextWriter, make_registry, render_text
from monitor.health import HealthBook
from monitor.runtime import Monitor
from monitor.service.collector import ServiceCollector
from monitor.service.derive import fleet_rates, stats_from_rates
from monitor.service.render import render_service
from monitor.service.schedule import Spreader, first_slot, offset
from tests.conftest import FIXTURES
from tests.service.pagegen import grow
from tests.support.appserver import serve_app
from tests.support.pagefarm import PageFarm
from tests.support.pageserver import Connection, Generated, Hang, PageServer

BASE = (FIXTURES / "sample_vllm_v1.prom").read_text()
START = 1_767_300_000.0


def settings(targets: dict[str, str], **service: object) -> Settings:
    return load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
        "windows": ["30s", "1m"], **service,
        "targets": [{"name": name, "url": url} for name, url in targets.items()]}})


def growing_transport() -> httpx.MockTransport:
    hits: dict[str, int] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        hits[host] = hits.get(host, 0) + 1
        return httpx.Response(200, text=grow(BASE, 1 + 0.1 * hits[host] * (1 + len(host) % 3)))

    return httpx.MockTransport(handler)


# -- offsets ------------------------------------------------------------------------------------


def test_offsets_are_stable_and_spread_over_the_interval() -> None:
    keys = [f"vllm-{i}\0http://10.0.{i // 250}.{i % 250}:8000/metrics" for i in range(1000)]
    offsets = [offset(k, 15.0) for k in keys]
    assert offsets == [offset(k, 15.0) for k in keys]  # the same slot on every start
    assert all(0.0 <= o < 15.0 for o in offsets)
    assert all(abs(round(o * 1000) - o * 1000) < 1e-6 for o in offsets)  # whole milliseconds
    per_second = [sum(1 for o in offsets if s <= o < s + 1) for s in range(15)]
    assert min(per_second) > 1000 / 15 / 2 and max(per_second) < 1000 / 15 * 2, per_second
    assert len(set(offsets)) > 950  # not bunched on a few instants
    assert offset("a\0http://x/metrics", 15.0) != offset("a\0http://y/metrics", 15.0)  # the URL counts


def test_first_slot_is_the_next_instant_at_the_offset() -> None:
    for now in (START, START + 0.3, START + 14.9):
        slot = first_slot(now, 7.25, 15.0)
        assert now <= slot < now + 15.0
        assert (slot - 7.25) % 15.0 == pytest.approx(0.0, abs=1e-6) or (slot - 7.25) % 15.0 == pytest.approx(15.0)


# -- no overlap, skipped slots --------------------------------------------------------------------


def test_a_slow_target_is_never_scraped_twice_at_once_and_the_others_keep_their_cadence() -> None:
    with PageServer() as pages:
        targets = {"good": pages.set("/good", Generated(lambda hit: grow(BASE, 1 + 0.1 * hit))),
                   "hung": pages.set("/hang", Hang())}
        # A scrape that outlives its slot: configs refuse a timeout over the interval, but a scrape can
        # still run past its slot (a slow parse, a busy loop); the schedule must hold it to one at a time.
        service = settings(targets, scrape_interval="200ms", scrape_timeout="200ms").service
        service = service.model_copy(update={"scrape_timeout": Duration("1s")})  # unvalidated on purpose

        async def run() -> tuple[Spreader, int, dict[str, object]]:
            async with httpx.AsyncClient(trust_env=False) as client:
                collector = ServiceCollector(service, client, HealthBook())
                with ThreadPoolExecutor(1) as cpu:
                    spreader = Spreader(collector, cpu)
                    most = 0
                    task = asyncio.create_task(spreader.run())
                    ends = time.monotonic() + 2.5
                    while time.monotonic() < ends:
                        most = max(most, sum(1 for n in spreader.running if n == "hung"))
                        await asyncio.sleep(0.02)
                    status = spreader.status()
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    return spreader, most, status

        spreader, most, status = asyncio.run(run())
    assert most == 1
    assert 2 <= pages.hits["/hang"] <= 3  # one scrape per 1 s timeout, not one per 200 ms slot
    assert pages.hits["/good"] >= 9  # ~12 slots in 2.5 s: the hung target delays nobody
    assert spreader.skipped >= 5  # the hung target's slots while its scrape was running
    assert status["targets"] == 2 and int(str(status["scrapes_skipped_total"])) >= 4


# -- lag and staleness with an injected clock --------------------------------------------------


def test_a_loop_that_falls_behind_says_so_and_counts_the_slots_it_missed() -> None:
    clock = [START]
    monitor = Monitor(settings({"a": "http://a/metrics"}), client=httpx.AsyncClient(transport=growing_transport()),
                      wall=lambda: clock[0])

    async def run() -> None:
        spreader = monitor.spreader = Spreader(monitor.service, None, lambda: clock[0])
        spreader.sync()
        slot = spreader._heap[0][0]
        clock[0] = slot + 37.5  # the loop was starved for two and a half intervals
        await spreader._launch_due()
        await asyncio.gather(*spreader.running.values())
        await monitor.aclose()

    asyncio.run(run())
    assert monitor.spreader is not None
    status = monitor.spreader.status()
    assert status["scrapes_skipped_total"] == 2
    assert status["lag_seconds"] == pytest.approx(37.5)
    assert status["keeping_up"] is False and "falling behind" in str(status["message"])
    text = monitor.metrics_text().decode()
    assert 'inference_monitor_scrape_lag_seconds{collector="service"} 37.5' in text
    assert 'inference_monitor_scrapes_skipped_total{collector="service"} 2.0' in text
    assert monitor.status()["layers"]["service"]["schedule"]["keeping_up"] is False


def test_a_target_not_scraped_for_two_intervals_is_stale_not_down_and_has_no_derived_series() -> None:
    clock = [START]
    monitor = Monitor(settings({"a": "http://a/metrics", "b": "http://bb/metrics"}),
                      client=httpx.AsyncClient(transport=growing_transport()), wall=lambda: clock[0])

    async def run() -> None:
        for _ in range(4):
            await monitor.run_once()
            clock[0] += 15.0
        await monitor.service.scrape(monitor.service.targets["b"])  # only b keeps being scraped
        clock[0] += 15.0
        await monitor.service.scrape(monitor.service.targets["b"])
        await monitor.aclose()

    asyncio.run(run())
    # a was last scraped 30 s ago: exactly two intervals, still shown
    assert monitor.service.assemble(clock[0]).targets["a"].stats
    clock[0] += 0.5  # a little past two intervals: a's numbers are stale, b's fresh
    monitor.service.derive(clock[0])
    view = monitor.service.assemble(clock[0])
    assert view.targets["a"].stale and not view.targets["a"].up and not view.targets["a"].stats
    assert view.targets["b"].up and not view.targets["b"].stale and view.targets["b"].stats
    assert view.fleet  # from b alone
    text = render_text(make_registry([lambda: render_service(view)])).decode()
    # Its last scrape succeeded: up, as Prometheus says it; stale, since the monitor fell behind on it.
    assert 'inference_target_up{target="a"} 1.0' in text and 'inference_target_stale{target="a"} 1.0' in text
    assert 'inference_target_stale{target="b"} 0.0' in text
    assert 'inference_monitor_stale_targets{collector="service"} 1.0' in text
    kept = {line.split("{", 1)[0] for line in text.splitlines() if 'target="a"' in line}
    assert kept == {"inference_target_up", "inference_target_stale", "inference_target_refused",
                    "inference_target_info"}  # none of a's numbers
    # The alert evaluator reads a as stale off this page: a's alerts on its numbers are held, not resolved.
    assert stale_targets(exposition_samples(text.encode(), {STALE_METRIC})) == {"a"}
    # No fact of a's is current, so none names it down as a probable cause.
    assert _target_facts(view, "a", None, None) == []
    assert [facts.up for facts in _target_facts(view, "b", None, None)] == [True]
    rows = {r["name"]: r for r in monitor.service.status()}
    assert rows["a"]["stale"] is True and rows["a"]["up"] is False
    assert rows["b"]["stale"] is False and rows["b"]["up"] is True


# -- incremental derivation equals derivation of all at once ------------------------------------


def test_stats_derived_after_each_scrape_equal_deriving_everything_at_that_time() -> None:
    clock = [START]
    names = {"a": "http://a/metrics", "b": "http://bb/metrics", "c": "http://ccc/metrics"}
    service: ServiceSettings = settings(names).service

    async def run() -> tuple[str, str]:
        async with httpx.AsyncClient(transport=growing_transport()) as client:
            collector = ServiceCollector(service, client, HealthBook(), wall=lambda: clock[0])
            with ThreadPoolExecutor(1) as cpu:
                for _ in range(5):
                    for state in collector.targets.values():  # each target in the worker thread
                        await collector.scrape(state, cpu)
                    clock[0] += 15.0
            clock[0] -= 15.0  # the last scrapes' time: where both evaluate
            incremental = render_text(make_registry([lambda: render_service(collector.assemble(clock[0]))]))
            at_once = render_text(make_registry([lambda: render_service(collector.derive(clock[0]))]))
            return incremental.decode(), at_once.decode()

    incremental, at_once = asyncio.run(run())
    assert 'inference_ttft_seconds{model="meta-llama/Llama-3.1-8B-Instruct",quantile="0.99",window="1m"}' in at_once
    assert incremental == at_once


# -- the background render ------------------------------------------------------------------------


def test_pre_rendered_metrics_equal_a_fresh_render(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exporter, "CHUNK", 2048)  # kept in pieces of 2 KB: a big page's render
    clock = [START]
    monitor = Monitor(settings({"a": "http://a/metrics", "b": "http://bb/metrics"}),
                      client=httpx.AsyncClient(transport=growing_transport()), wall=lambda: clock[0])

    async def run() -> None:
        for _ in range(3):
            await monitor.run_once()
            clock[0] += 15.0
        clock[0] -= 15.0
        await monitor.aclose()

    asyncio.run(run())
    for entry in monitor.health.entries.values():
        entry.duration_seconds = 0.01  # measured: pinned so two renders agree
    fresh = render_text(monitor.registry, TextWriter())
    assert monitor.exposition.latest is None
    monitor.publish()  # what the publish tick runs in the worker thread
    latest = monitor.exposition.latest
    assert latest is not None and latest.sequence == 1 and latest.rendered_at == clock[0]
    assert len(latest.chunks) > 5 and all(chunk.endswith(b"\n") for chunk in latest.chunks)
    assert latest.body == fresh and latest.size == len(fresh)
    assert monitor.metrics_text() is latest.body  # /metrics serves it as is
    monitor.publish()
    assert monitor.exposition.latest is not None and monitor.exposition.latest.sequence == 2
    assert monitor.exposition.latest.body == fresh  # the cached label texts change nothing
    assert gzip.decompress(monitor.exposition.latest.gzipped()) == fresh  # what gzip-accepting scrapers get


# -- the real app under 200 targets --------------------------------------------------------------


def wait_for(check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.2)


def _scrapes(client: httpx.Client) -> int:
    return int(client.get("/api/v1/status").json()["layers"]["service"]["schedule"]["scrapes_started_total"])


def test_healthz_and_metrics_answer_while_200_targets_are_scraped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every answer while the targets are scraped, and no scrape skipped. How fast they answer is
    measured by `python -m bench.scale` (/healthz p99 beside the real Prometheus), not here: a
    timed assert fails on a busy machine for the machine's sake. The page is kept and sent in
    pieces of 64 KB, as a page of 1,000 targets is in pieces of 1 MB."""
    monkeypatch.setattr(exporter, "CHUNK", 1 << 16)
    with PageFarm([BASE.encode()], processes=1) as farm:
        targets = {f"t{i}": url for i, url in enumerate(farm.urls(200))}
        monitor = Monitor(settings(targets, scrape_interval="5s"))
        with serve_app(monitor) as base, httpx.Client(base_url=base, timeout=30, trust_env=False) as client:
            def all_up() -> bool:
                text = client.get("/metrics").text
                return sum(f'inference_target_up{{target="{name}"}} 1.0' in text for name in targets) == 200

            wait_for(all_up, 60)
            codes: list[int] = []
            scraped = _scrapes(client)
            deadline = time.monotonic() + 120
            while _scrapes(client) < scraped + 2 * len(targets):  # every target scraped twice more, answering meanwhile
                assert time.monotonic() < deadline, "the scrapes stopped"
                codes.extend(client.get(path).status_code for path in ("/healthz", "/metrics"))
                time.sleep(0.05)
            status = client.get("/api/v1/status").json()
            ready = client.get("/readyz").status_code
            packed = client.get("/metrics", headers={"Accept-Encoding": "gzip"})
            plain = client.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert ready == 200
    assert packed.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
    assert 'inference_target_up{target="t199"} 1.0' in packed.text  # httpx decodes it
    assert 'inference_target_up{target="t199"} 1.0' in plain.text and plain.text.endswith("\n")
    assert int(plain.headers["content-length"]) == len(plain.content) > 4 * (1 << 16)  # several pieces
    rows = status["layers"]["service"]["targets"]
    assert len(rows) == 200 and all(r["up"] for r in rows)
    schedule = status["layers"]["service"]["schedule"]
    assert schedule["targets"] == 200 and schedule["scrapes_skipped_total"] == 0
    assert len(codes) >= 4 and set(codes) == {200}


# -- the kept-connection path of `infermon serve` (monitor.scrape.TargetConnection, on the wire) ----


class Moved:
    """301 to another path, as a reverse proxy in front of an engine may answer."""

    def __init__(self, location: str) -> None:
        self.location = location

    def serve(self, conn: Connection) -> None:
        conn.send_head(301, {"Location": self.location, "Content-Length": "0"})


def test_serve_scrapes_follow_redirects_and_keep_credentials_on_the_same_origin() -> None:
    with PageServer() as pages:
        pages.set("/metrics", Generated(lambda hit: grow(BASE, 1 + 0.1 * hit)))
        pages.set("/old", Moved("/metrics"))
        pages.set("/loop", Moved("/loop"))
        url = pages.url("/old").replace("http://", "http://user:p%40ss@")
        monitor = Monitor(settings({"moved": url, "loop": pages.url("/loop")}))

        async def run() -> None:
            await monitor.run_once()
            await monitor.aclose()

        asyncio.run(run())
        sent = [r.headers for r in pages.requests if r.path == "/metrics"]
    assert monitor.service.targets["moved"].pool is not None  # the serve path: its own connection, not httpx
    rows = {r["name"]: r for r in monitor.service.status()}
    assert rows["moved"]["up"] is True, rows["moved"]["error"]
    assert sent and sent[0].get("authorization") == "Basic dXNlcjpwQHNz"  # user:p@ss
    assert rows["loop"]["up"] is False and rows["loop"]["error"] == "more than 10 redirects"


def test_the_fleet_sums_a_model_over_its_targets_and_takes_a_lone_target_as_it_is() -> None:
    # a and bb serve the fixture's model, ccc another one: the fleet of the first is the sum of
    # two targets' rates, the other's is ccc's own derived numbers (not summed again).
    other = BASE.replace("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B")
    hits: dict[str, int] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        hits[host] = hits.get(host, 0) + 1
        return httpx.Response(200, text=grow(other if host == "ccc" else BASE, 1 + 0.1 * hits[host] * len(host)))

    clock = [START]
    monitor = Monitor(settings({"a": "http://a/metrics", "bb": "http://bb/metrics", "ccc": "http://ccc/metrics"}),
                      client=httpx.AsyncClient(transport=httpx.MockTransport(handler)), wall=lambda: clock[0])

    async def run() -> None:
        for _ in range(4):
            await monitor.run_once()
            clock[0] += 15.0
        await monitor.aclose()

    asyncio.run(run())
    collector = monitor.service
    view = collector.assemble(clock[0] - 15.0)
    llama, qwen = "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"
    for window in collector.windows:
        rates = [collector.targets[n].derived.rates[window.label] for n in ("a", "bb", "ccc")]  # type: ignore[union-attr]
        summed = fleet_rates(rates)
        assert view.fleet[(llama, window.label)] == stats_from_rates(summed[llama], collector.objectives)
        assert view.fleet[(qwen, window.label)] is view.targets["ccc"].stats[(qwen, window.label)]
        both = view.fleet[(llama, window.label)].requests_per_second
        alone = [view.targets[n].stats[(llama, window.label)].requests_per_second for n in ("a", "bb")]
        assert both is not None and None not in alone and both == pytest.approx(sum(alone))  # type: ignore[arg-type]
    assert [key[0] for key in view.fleet] == [llama, qwen] * len(collector.windows)  # the order of old
