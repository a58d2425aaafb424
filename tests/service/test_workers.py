"""Parse workers (`service.parse_workers`): pages parsed and targets derived in processes of their
own give what the monitor's worker thread gives, number for number; a broken page is still the
target's fault, a parse worker that dies is the monitor's, and its targets come back in a new
process with their stored baselines; `infermon serve` ends the processes it started."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from monitor.config import ConfigError, ServiceSettings, load_settings
from monitor.exporter import TextWriter, make_registry, render_text
from monitor.health import HealthBook
from monitor.runtime import Monitor
from monitor.service.baseline import BaselineHistory
from monitor.service.collector import COLLECTOR, ServiceCollector
from monitor.service.derive import expand
from monitor.service.render import ServiceText, render_service
from monitor.service.view import ServiceView
from monitor.service.workers import MonitorFault, ParseWorkers
from monitor.store.session import Store
from tests.conftest import FIXTURES
from tests.service.pagegen import grow
from tests.service.test_schedule import wait_for
from tests.support.appserver import serve_app
from tests.support.pagefarm import PageFarm
from tests.support.pages import fleet_page

START = 1_767_300_000.0
REAL = FIXTURES / "real_engines"
PAGES = {  # host -> the page it grows from: real engines' pages, and one engine serving three models
    "vllm": (FIXTURES / "sample_vllm_v1.prom").read_text(),
    "vllm033": (REAL / "vllm-0.33.0_t60.prom").read_text(),
    "sglang": (REAL / "sglang-0.5.23_t60.prom").read_text(),
    "llamacpp": (REAL / "llama.cpp-server_metrics.prom").read_text(),
    "three": fleet_page(engines=1, models=3),
    "vllm-b": (FIXTURES / "sample_vllm_v1.prom").read_text(),  # models on two targets: the fleet sums
    "three-b": fleet_page(engines=1, models=3),
}


def service_settings(**service: object) -> ServiceSettings:
    return load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
        "windows": ["30s", "1m"], "baseline_window": "2m", "baseline_min_coverage": 0.5, "engine_version": True,
        **service,
        "targets": [{"name": host, "url": f"http://{host}/metrics"} for host in PAGES]}}).service


def growing_transport(broken: set[str]) -> httpx.MockTransport:
    hits: dict[str, int] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if request.url.path != "/metrics":  # the engine's API: its version (monitor/service/version.py)
            return httpx.Response(200, json={"version": f"{host}-1.0", "build_info": f"{host}-b1"})
        hits[host] = hits.get(host, 0) + 1
        page = grow(PAGES[host], 1 + 0.1 * hits[host] * (1 + len(host) % 3))
        return httpx.Response(200, text=page[:-1] if host in broken else page)  # cut: no final line feed

    return httpx.MockTransport(handler)


async def scrape_all(collector: ServiceCollector, cpu: ThreadPoolExecutor) -> None:
    for state in collector.targets.values():
        await collector.scrape(state, cpu)


def test_worker_processes_derive_what_the_worker_thread_derives() -> None:
    clock = [START]
    service = service_settings()
    workers = ParseWorkers(service, 2)

    async def run() -> tuple[list[ServiceCollector], list[str]]:
        broken: set[str] = set()
        async with httpx.AsyncClient(transport=growing_transport(broken)) as one, \
                httpx.AsyncClient(transport=growing_transport(broken)) as other:
            thread = ServiceCollector(service, one, HealthBook(), wall=lambda: clock[0])
            processes = ServiceCollector(service, other, HealthBook(), wall=lambda: clock[0], workers=workers)
            both = [thread, processes]
            for collector in both:
                collector.pipeline.persist = True  # baseline points queued for the store, as under serve
            with ThreadPoolExecutor(1) as cpu:
                for step in range(12):
                    broken.clear()
                    if step == 6:
                        broken.add("sglang")  # a page cut short: down in both, for the same reason
                    for collector in both:
                        await scrape_all(collector, cpu)
                    clock[0] += 15.0
            clock[0] -= 15.0
            texts = [render_text(make_registry([lambda c=c: render_service(c.assemble(clock[0]))])).decode()
                     for c in both]
            pids.extend(workers.pids())
            await workers.aclose()
            return both, texts

    pids: list[int] = []
    (thread, processes), (thread_text, process_text) = asyncio.run(run())
    assert len(pids) == 2  # each target in one of two processes
    assert not workers.pids() and not any(alive(pid) for pid in pids)
    assert 'inference_ttft_seconds{model="meta-llama/Llama-3.1-8B-Instruct",quantile="0.99",window="1m"}' in thread_text
    assert 'target="sglang"' in thread_text and 'target="llamacpp"' in thread_text
    fleet = 'inference_ttft_seconds{model="org/model-1",quantile="0.99",window="1m"}'  # summed over two targets
    assert fleet in thread_text
    assert process_text == thread_text  # every number, gauge, ratio and baseline
    rows = {row["name"]: row for row in processes.status()}
    for row in thread.status():
        for key in ("up", "state", "engine", "generation", "models", "baseline", "duplicate_series",
                    "non_finite_samples", "error"):
            assert rows[row["name"]][key] == row[key], (row["name"], key)
    assert rows["three"]["models"] == sorted(thread.targets["three"].models) and len(rows["three"]["models"]) == 3
    sent, kept = list(processes.pipeline.pending), list(thread.pipeline.pending)
    assert sent == kept and kept  # the same points to store
    for name, state in thread.targets.items():  # the gauges the view reads came back whole
        other = processes.targets[name]
        assert other.latest is not None and state.latest is not None
        assert (other.latest.ts, other.latest.gauges, other.latest.labelled) == \
            (state.latest.ts, state.latest.gauges, state.latest.labelled)
        assert other.derived is not None and other.derived.texts is not None and state.derived is not None
        sent = {label: {model: expand(rates) for model, rates in by_model.items()}  # their numbers in rows
                for label, by_model in other.derived.rates.items()}
        assert replace(other.derived, texts=None, rates=sent) == state.derived
    # The publish's page: the target lines the workers rendered, kept as they came, equal the
    # lines the monitor renders itself; only the fleet's rows are rendered on its side.
    pages, rendered = [], []
    for collector in (thread, processes):
        text = CountingText()
        out: list[str] = []
        text.render(collector.assemble(clock[0]), TextWriter(), out)
        pages.append("".join(out))
        rendered.append(text.renders)
    assert pages[1] == pages[0] and pages[0].startswith("# HELP inference_target_up")
    assert 'target="llamacpp",version="llamacpp-b1"} 1.0' in pages[0]  # the workers' lines carry the version
    assert rendered == [len(PAGES) + 1, 1]


class CountingText(ServiceText):
    def __init__(self) -> None:
        super().__init__()
        self.renders = 0

    def _texts(self, view: ServiceView, writer: TextWriter) -> dict[str, str]:
        self.renders += 1
        return super()._texts(view, writer)


def test_a_broken_page_is_the_targets_fault_and_a_dead_worker_the_monitors(tmp_path: Path) -> None:
    clock = [START]
    service = service_settings()
    workers = ParseWorkers(service, 1)
    store = Store(f"sqlite:///{tmp_path / 'infermon.db'}")
    health = HealthBook()

    async def run() -> None:
        broken: set[str] = set()
        async with httpx.AsyncClient(transport=growing_transport(broken)) as client:
            collector = ServiceCollector(service, client, health, wall=lambda: clock[0],
                                         history=BaselineHistory(store.engine), workers=workers)
            vllm = collector.targets["vllm"]
            answers: list[str] = []
            workers.after_answer = lambda: answers.append("read")  # serve freezes the heap here
            with ThreadPoolExecutor(1) as cpu:
                for _ in range(8):
                    await scrape_all(collector, cpu)
                    clock[0] += 15.0
                assert len(answers) == 1 + 8 * len(PAGES)  # the start, then each page
                collector.flush_baselines()  # what the monitor stores every minute
                before = vllm.derived
                assert before is not None and before.stats[("meta-llama/Llama-3.1-8B-Instruct", "1m")].baseline_coverage

                broken.add("vllm")
                await collector.scrape(vllm, cpu)
                assert not vllm.up and vllm.error is not None and "line feed" in vllm.error  # the target's fault
                broken.clear()
                await collector.scrape(vllm, cpu)
                assert vllm.up and vllm.error is None

                (pid,) = workers.pids()
                os.kill(pid, signal.SIGSTOP)  # the worker this test's collector started: it reads nothing now
                scrape = asyncio.create_task(collector.scrape(vllm, cpu))
                await until(lambda: bool(workers._slots[0].process and workers._slots[0].process.waiting))
                os.kill(pid, signal.SIGKILL)  # dies with the page in hand
                await scrape
                entry = health.get(COLLECTOR, "vllm")
                assert entry.success is False and entry.error is not None and "parse worker 0 ended" in entry.error
                assert vllm.up and vllm.error is None  # no verdict on the engine: the monitor failed
                assert workers.status()["restarts"] == 1

                clock[0] += 15.0
                for _ in range(2):  # a new process: the target's windows start afresh, its baseline reloaded
                    await scrape_all(collector, cpu)
                    clock[0] += 15.0
                assert health.get(COLLECTOR, "vllm").success is True
                assert all(state.up for state in collector.targets.values())
                (new_pid,) = workers.pids()
                assert new_pid != pid
                after = vllm.derived
                assert after is not None
                stats = after.stats[("meta-llama/Llama-3.1-8B-Instruct", "1m")]
                assert stats.requests_per_second is not None
                assert stats.baseline_coverage is not None and stats.baseline_coverage >= 0.5  # not from zero

                os.kill(new_pid, signal.SIGKILL)  # ends between two pages: the next one starts a new process
                await until(lambda: new_pid not in workers.pids())
                await collector.scrape(vllm, cpu)
                assert health.get(COLLECTOR, "vllm").success is True and vllm.up
                assert workers.status()["restarts"] == 2 and new_pid not in workers.pids()
                await collector.aclose()
                await workers.aclose()
                assert not alive(new_pid) and not workers.pids()

    try:
        asyncio.run(run())
    finally:
        store.close()


async def until(check: Callable[[], bool]) -> None:
    for _ in range(400):  # bounded: 20 s
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_serve_parses_in_its_workers_and_ends_them() -> None:
    page = (FIXTURES / "sample_vllm_v1.prom").read_bytes()
    with PageFarm([page], processes=1) as farm:
        settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
            "windows": ["30s", "1m"], "scrape_interval": "5s", "parse_workers": 2,
            "targets": [{"name": f"t{i}", "url": url} for i, url in enumerate(farm.urls(6))]}})
        monitor = Monitor(settings)
        with serve_app(monitor) as base, httpx.Client(base_url=base, timeout=30, trust_env=False) as client:
            def service() -> dict[str, object]:
                layers: dict[str, dict[str, object]] = client.get("/api/v1/status").json()["layers"]
                return layers["service"]

            wait_for(lambda: all(t["up"] for t in service()["targets"]), 60)  # type: ignore[attr-defined]
            shown = service()["parse_workers"]
            assert isinstance(shown, dict) and shown["processes"] == 2 and shown["restarts"] == 0
            assert sum(shown["targets"]) == 6
            pids = shown["pids"]
            assert pids and all(pid != os.getpid() for pid in pids)

            def derived() -> bool:  # the rates of a target need its second scrape, then a publish
                lines = client.get("/metrics").text.splitlines()
                return 'inference_target_up{target="t0"} 1.0' in lines and any(
                    line.startswith("inference_requests_per_second{") and 'target="t0"' in line for line in lines)

            wait_for(derived, 60)
            workers = monitor.service.workers
            assert workers is not None and workers.after_answer == monitor.heap.tick  # answers frozen as read
        assert not monitor.service.workers or not monitor.service.workers.pids()
        assert not any(alive(pid) for pid in pids)  # ended, and reaped


def test_parse_workers_is_checked_at_start() -> None:
    with pytest.raises(ConfigError, match="parse_workers"):
        load_settings(None, {"service": {"parse_workers": -1}})


class DyingWorkers:
    """A stand-in for the collector's side of a worker that dies under every page (the real one's
    death is above): each page raises `MonitorFault` and moves the worker's generation on."""

    def __init__(self) -> None:
        self.generations = 0
        self.reloads: list[object] = []

    def generation(self, name: str) -> int:
        return self.generations

    async def ingest(self, state: object, reload: object, *page: object) -> object:
        self.reloads.append(reload)
        self.generations += 1
        raise MonitorFault("parse worker 0 ended while it read this page")

    def forget(self, name: str) -> None:
        return None


def test_baseline_points_lost_with_a_dead_worker_go_again_with_the_next_page() -> None:
    workers = DyingWorkers()

    async def run() -> None:
        async with httpx.AsyncClient(transport=growing_transport(set())) as client:
            collector = ServiceCollector(service_settings(), client, HealthBook(),
                                         workers=workers)  # type: ignore[arg-type]
            state = collector.targets["vllm"]
            with ThreadPoolExecutor(1) as cpu:
                for _ in range(2):
                    await collector.scrape(state, cpu)
            assert state.up is False and state.error is None and state.derived is None  # no verdict

    asyncio.run(run())
    assert workers.reloads == [[], []]  # the points (none stored here) went with both pages
