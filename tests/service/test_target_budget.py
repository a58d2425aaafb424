"""What one target may cost the monitor (#48 item 1, monitor/service/budget.py).

A page naming 20,000 models (2.4 MB, under the page cap) froze the service and alerting pipeline
until a restart. A page over a budget now refuses its target with the reason (state `refused`,
`inference_target_refused` 1, a log line) while the other targets and jobs go on; a parse worker
stuck on a page is killed and replaced; split counters keep a bounded number of label values."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from monitor.config import load_settings
from monitor.health import HealthBook
from monitor.promtext import parse
from monitor.runtime import Monitor
from monitor.service.budget import REFUSE_INTERVALS, series_on_page
from monitor.service.collector import COLLECTOR, ServiceCollector
from monitor.service.engines import find_engine
from monitor.service.extract import SPLIT_VALUES, extract
from monitor.service.workers import ParseWorkers
from tests.conftest import FIXTURES
from tests.service.pagegen import grow
from tests.service.test_schedule import wait_for
from tests.service.test_workers import until
from tests.support.appserver import serve_app
from tests.support.pageserver import Page, PageServer

FIXTURE = (FIXTURES / "sample_vllm_v1.prom").read_text()
REAL = (FIXTURES / "real_engines" / "vllm-0.33.0_t60.prom").read_text()


def many_models(count: int) -> str:
    """The fixture page, and one gauge line for each of `count` more model names (~120 bytes each)."""
    extra = [f'vllm:num_requests_running{{engine="0",model_name="org/fine-tune-{i:05d}-instruct"}} 1.0'
             for i in range(count)]
    return FIXTURE + "\n".join(extra) + "\n"




def test_series_on_page_counts_samples_not_comments() -> None:
    assert series_on_page("") == 0
    assert series_on_page("# HELP a x\n# TYPE a gauge\na 1\nb 2\n") == 2
    assert series_on_page("a 1\nb 2") == 2  # no final line feed
    parsed = parse(FIXTURE)
    samples = sum(len(family) for family in parsed.samples.values())
    assert series_on_page(FIXTURE) >= samples  # an upper bound: blank lines count too


def test_a_target_over_a_budget_is_refused_and_the_others_go_on(caplog: pytest.LogCaptureFixture) -> None:
    hostile_models = many_models(20_000)
    assert 1_500_000 < len(hostile_models.encode()) < 10_000_000  # under the page cap, as the report's 2.4 MB was
    with PageServer() as server:
        server.set("/good", Page(FIXTURE))
        server.set("/models", Page(hostile_models))
        server.set("/series", Page(FIXTURE + "".join(f"x_{i} 1\n" for i in range(25_000))))
        settings = load_settings(None, {"infra": {"nvml": {"enabled": False}}, "service": {
            "scrape_interval": "1s", "windows": ["3s"], "max_series_per_target": 21_000,
            "targets": [{"name": name, "url": server.url(f"/{name}")} for name in ("good", "models", "series")]}})
        monitor = Monitor(settings)
        caplog.set_level(logging.WARNING, "monitor.service")
        with serve_app(monitor) as base:
            def rows() -> dict[str, dict[str, object]]:
                status = httpx.get(f"{base}/api/v1/status", timeout=10).json()
                return {row["name"]: row for row in status["layers"]["service"]["targets"]}

            wait_for(lambda: {name: row["state"] for name, row in rows().items()}
                     == {"good": "up", "models": "refused", "series": "refused"}, 30)
            shown = rows()
            assert shown["models"]["error"] == ("refused: 20,001 models on the page, over "
                                                "service.max_models_per_target (1,000); not derived")
            assert str(shown["series"]["error"]).startswith("refused: ")
            assert "series on the page, over service.max_series_per_target (21,000); not parsed" in \
                str(shown["series"]["error"])
            expected = [f'inference_target_{metric}{{target="{name}"}} {value}'
                        for name, up, refused in (("good", 1.0, 0.0), ("models", 0.0, 1.0), ("series", 0.0, 1.0))
                        for metric, value in (("up", up), ("refused", refused))]
            wait_for(lambda: all(line in httpx.get(f"{base}/metrics", timeout=10).text for line in expected), 30)
            page = httpx.get(f"{base}/metrics", timeout=10).text
            assert 'model="org/fine-tune-' not in page  # none of its 20,000 models exported
            assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200
            # The good target keeps being scraped and derived beside them.
            hits = server.hits["/good"]
            wait_for(lambda: server.hits["/good"] >= hits + 2, 30)
            assert rows()["good"]["state"] == "up"
    refusals = [r.getMessage() for r in caplog.records if "refused:" in r.getMessage()]
    assert any(m.startswith("target models refused: 20,001 models") for m in refusals), refusals
    assert len([m for m in refusals if m.startswith("target models")]) == 1  # said once, not every scrape


def test_a_page_over_the_time_budget_sits_out_its_intervals() -> None:
    settings = load_settings(None, {"infra": {"nvml": {"enabled": False}}, "service": {
        "scrape_interval": "1s", "windows": ["3s"], "max_ingest_time": "1ms",  # any real page takes longer
        "targets": [{"name": "slow", "url": "http://slow/metrics"}]}}).service
    hits: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hits.append(1)
        return httpx.Response(200, text=grow(FIXTURE, 1 + 0.1 * len(hits)))

    async def run() -> None:
        health = HealthBook()
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            collector = ServiceCollector(settings, client, health)
            state = collector.targets["slow"]
            with ThreadPoolExecutor(1) as cpu:
                await collector.scrape(state, cpu)
                assert state.refused and not state.up and state.refused_until is not None
                assert state.error is not None and "over service.max_ingest_time (0.001 s)" in state.error
                assert f"not scraped for {REFUSE_INTERVALS} intervals" in state.error
                for _ in range(3):  # while it sits out, its page is not even fetched
                    await collector.scrape(state, cpu)
                assert len(hits) == 1 and state.refused
                assert health.get(COLLECTOR, "slow").error == state.error
                state.refused_until = time.monotonic() - 1  # its intervals have passed
                await collector.scrape(state, cpu)
                assert len(hits) == 2  # fetched again (and, still slow, refused again)
        status = collector.status()[0]
        assert status["state"] == "refused"

    asyncio.run(run())


def test_a_parse_worker_stuck_on_a_page_is_replaced_and_its_target_refused() -> None:
    settings = load_settings(None, {"infra": {"nvml": {"enabled": False}}, "service": {
        "scrape_interval": "1s", "scrape_timeout": "500ms", "windows": ["3s"], "max_ingest_time": "1s",
        "targets": [{"name": "a", "url": "http://a/metrics"}, {"name": "b", "url": "http://b/metrics"}]}}).service
    workers = ParseWorkers(settings, 1)  # both targets in the one process

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=FIXTURE)

    async def run() -> None:
        health = HealthBook()
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            collector = ServiceCollector(settings, client, health, workers=workers)
            a, b = collector.targets["a"], collector.targets["b"]
            with ThreadPoolExecutor(1) as cpu:
                await collector.scrape(a, cpu)
                await collector.scrape(b, cpu)
                assert a.up and b.up
                (pid,) = workers.pids()
                os.kill(pid, signal.SIGSTOP)  # stuck: it reads nothing and answers nothing
                started = time.monotonic()
                await collector.scrape(a, cpu)
                assert time.monotonic() - started < 20  # its deadline: 3 x 1 s (at least the 500 ms timeout)
                assert a.refused and not a.up and a.error is not None
                assert "parse worker did not answer its page within" in a.error
                await until(lambda: pid not in workers.pids())
                assert workers.status()["restarts"] == 1
                await collector.scrape(b, cpu)  # the other target of that worker: read again, in a new process
                assert b.up and health.get(COLLECTOR, "b").success is True
                (new_pid,) = workers.pids()
                assert new_pid != pid
                await collector.aclose()
        await workers.aclose()

    try:
        asyncio.run(run())
    finally:
        for pid in workers.pids():  # a failed assertion above: end what this test started
            os.kill(pid, signal.SIGKILL)


def test_a_split_counter_keeps_its_first_label_values() -> None:
    # 10,000 draft positions became 20,000 exported position series: now the first 64 are kept.
    family = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    positions = [f'{family}{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="{i}"}} {i}.0'
                 for i in range(10_000)]
    kept = [line for line in REAL.splitlines() if not line.startswith(family + "{")]
    at = kept.index(f"# TYPE {family} counter") + 1
    page = parse("\n".join(kept[:at] + positions + kept[at:]) + "\n")
    spec = find_engine("vllm", "v1")
    assert spec is not None
    snap = extract(page, spec, 0.0, "unknown")
    positions = [name for name in snap.counters if name.startswith("spec_accepted_pos/")]
    assert len(positions) == SPLIT_VALUES and "spec_accepted_pos/0" in positions
    assert snap.split_dropped == 10_000 - SPLIT_VALUES


def test_the_budgets_are_settings_with_floors(tmp_path: Path) -> None:
    from monitor.config import ConfigError

    for key, value in (("max_series_per_target", 10), ("max_models_per_target", 0)):
        with pytest.raises(ConfigError, match=f"service.{key}"):
            load_settings(None, {"service": {key: value}})
    defaults = load_settings(None).service
    assert (defaults.max_series_per_target, defaults.max_models_per_target) == (200_000, 1_000)
    assert defaults.max_ingest_time.seconds == 10
