"""No exception ends a collection job; a job that stopped or made no progress fails /healthz.

Each job's inner step is made to raise an unexpected exception under the real app (uvicorn, the
real scheduler): the job runs again, the error is counted in inference_monitor_job_errors_total,
and /api/v1/status says why. A dead loop and a hung job fail /healthz, naming the job."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from monitor.config import load_settings
from monitor.runtime import Job, Monitor
from monitor.service.schedule import SCRAPES, Spreader
from tests.service.test_discovery import wait_until
from tests.support.appserver import serve_app
from tests.support.pageserver import Page, PageServer
from tests.test_cli import FIXTURE


class FailsOnce:
    """Raises on its first call, then does what it wraps; counts the calls."""

    def __init__(self, name: str, wrapped: Callable[..., Any]) -> None:
        self.name, self.wrapped, self.calls = name, wrapped, 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError(f"injected failure in {self.name}")
        return self.wrapped(*args)


def fast_monitor(pages: PageServer, wall: Callable[[], float] | None = None) -> Monitor:
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
        "scrape_interval": "1s", "targets": [{"name": "a", "url": pages.url("/a")}]}})
    monitor = Monitor(settings, wall=wall) if wall else Monitor(settings)
    for job in monitor.jobs:
        if job.loop is None:
            job.interval_seconds = 0.2  # every scheduled job runs again within the test
    return monitor


def jobs(client: httpx.Client) -> dict[str, dict[str, Any]]:
    return {job["job"]: job for job in client.get("/api/v1/status").json()["jobs"]}


def test_each_job_survives_an_unexpected_exception_in_its_step(monkeypatch: pytest.MonkeyPatch) -> None:
    with PageServer() as pages:
        pages.set("/a", Page(FIXTURE))
        monitor = fast_monitor(pages)
        injected: dict[str, FailsOnce] = {}
        for job in monitor.jobs:
            if job.loop is None and job.cron is None:
                job.run = injected.setdefault(job.name, FailsOnce(job.name, job.run))
        # The service job's steps: file_sd refresh and the publish tick; the spread schedule's step.
        injected["service"] = FailsOnce("service", monitor.publish)
        monkeypatch.setattr(monitor, "publish", injected["service"])
        sync = injected[SCRAPES] = FailsOnce(SCRAPES, Spreader.sync)
        monkeypatch.setattr(Spreader, "sync", lambda spreader: sync(spreader))
        refresh = FailsOnce("service", monitor.service.refresh_targets)
        monkeypatch.setattr(monitor.service, "refresh_targets", refresh)
        assert {"service", "infra", "cost", "delivery", "alerts", "retention", "quality_refresh"} <= set(injected)
        with serve_app(monitor) as url, httpx.Client(base_url=url) as client:
            wait_until(lambda: all(step.calls >= 3 for step in injected.values()) and refresh.calls >= 3)
            wait_until(lambda: 'inference_target_up{target="a"} 1.0' in client.get("/metrics").text)
            state = jobs(client)
            for name in injected:
                assert f"injected failure in {name}" in state[name]["last_error"], name
                assert state[name]["failing"] is False and state[name]["problem"] is None, name
            assert state["service"]["errors"] == 2  # its publish tick and its file_sd refresh
            assert all(state[name]["errors"] == 1 for name in injected if name != "service")
            metrics = client.get("/metrics").text
            for name in injected:
                assert f'inference_monitor_job_healthy{{job="{name}"}} 1.0' in metrics
                assert f'inference_monitor_job_errors_total{{job="{name}"}} ' in metrics
            assert client.get("/healthz").json() == {"status": "ok"}
            assert client.get("/readyz").status_code == 200


def test_a_stopped_loop_fails_healthz_naming_the_job() -> None:
    async def dies() -> None:
        raise RuntimeError("a bug nobody caught")

    with PageServer() as pages:
        pages.set("/a", Page(FIXTURE))
        monitor = fast_monitor(pages)
        monitor.jobs[0].loop = dies
        with serve_app(monitor) as url, httpx.Client(base_url=url) as client:
            wait_until(lambda: client.get("/healthz").status_code == 503)
            assert client.get("/healthz").json() == {
                "status": "failing", "jobs": {"service": "stopped: RuntimeError: a bug nobody caught"}}
            assert 'inference_monitor_job_healthy{job="service"} 0.0' in client.get("/metrics").text


def test_a_job_that_makes_no_progress_fails_healthz() -> None:
    clock = [1_767_300_000.0]

    async def never_returns() -> None:
        await asyncio.sleep(3600)  # a hung read: the scheduler never runs it again (max_instances=1)

    with PageServer() as pages:
        pages.set("/a", Page(FIXTURE))
        monitor = fast_monitor(pages, wall=lambda: clock[0])
        infra: Job = next(job for job in monitor.jobs if job.name == "infra")
        run: Callable[[], Awaitable[Any]] = never_returns
        infra.run = run
        with serve_app(monitor) as url, httpx.Client(base_url=url) as client:
            wait_until(lambda: monitor.health.job("delivery").last_progress is not None)
            assert client.get("/healthz").status_code == 200  # a slow first run is not yet a stuck one
            clock[0] += 600  # 10 minutes on, the other jobs keep stepping; infra never finished one
            wait_until(lambda: set(client.get("/healthz").json().get("jobs", {})) == {"infra"})
            reply = client.get("/healthz")
            assert reply.status_code == 503
            assert reply.json()["jobs"]["infra"] == "no progress for 600s (expected every 0.2s)"
            assert 'inference_monitor_job_healthy{job="infra"} 0.0' in client.get("/metrics").text


def test_a_skipped_run_is_counted_not_logged_each_time(caplog: pytest.LogCaptureFixture) -> None:
    """A job still running when its next run is due is skipped (one at a time, never stacked).
    APScheduler warned once per skip: under load, a line a second for each 1-s job."""
    import logging

    caplog.set_level(logging.INFO)

    async def slow() -> None:
        await asyncio.sleep(1.5)  # seven intervals of 0.2 s

    with PageServer() as pages:
        pages.set("/a", Page(FIXTURE))
        monitor = fast_monitor(pages)
        infra: Job = next(job for job in monitor.jobs if job.name == "infra")
        run: Callable[[], Awaitable[Any]] = slow
        infra.run = run
        with serve_app(monitor) as url, httpx.Client(base_url=url) as client:
            def skips() -> float:  # /metrics is rendered a tick after the count changes
                text = client.get("/metrics").text
                found = [line for line in text.splitlines()
                         if line.startswith('inference_monitor_job_skipped_runs_total{job="infra"}')]
                return float(found[0].split()[-1]) if found else 0.0

            wait_until(lambda: skips() >= 3)
            metrics = client.get("/metrics").text
    assert 'inference_monitor_job_skipped_runs_total{job="delivery"} 0.0' in metrics  # a quick job skips none
    assert not [r for r in caplog.records if "maximum number of running instances" in r.getMessage()]


def test_a_run_missed_while_the_loop_was_busy_is_counted_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A process too busy to start a job within its grace time (a neighbour eating the CPU, a stalled
    loop): APScheduler skips the run and warned once per miss; counted like a skip instead."""
    import logging
    import time

    caplog.set_level(logging.INFO)
    stalled = [False]

    async def stall() -> None:
        if not stalled[0]:
            stalled[0] = True
            time.sleep(2.5)  # the whole loop, past every 0.2-s job's grace time of 1 s

    with PageServer() as pages:
        pages.set("/a", Page(FIXTURE))
        monitor = fast_monitor(pages)
        infra: Job = next(job for job in monitor.jobs if job.name == "infra")
        run: Callable[[], Awaitable[Any]] = stall
        infra.run = run
        with serve_app(monitor) as url, httpx.Client(base_url=url) as client:
            def missed() -> float:
                text = client.get("/metrics").text
                return sum(float(line.split()[-1]) for line in text.splitlines()
                           if line.startswith("inference_monitor_job_skipped_runs_total{"))

            wait_until(lambda: stalled[0] and missed() >= 1)
    assert not [r for r in caplog.records if " was missed by " in r.getMessage()]
