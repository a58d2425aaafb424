"""FastAPI app: the HTTP interface, with the collectors scheduled in its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from monitor.alerting.am_receiver import add_alertmanager_route
from monitor.auth import write_access
from monitor.cost.report import cost_report
from monitor.jsonpieces import json_in_pieces, json_response
from monitor.layer import Job
from monitor.redaction import redact_urls
from monitor.runtime import Monitor
from monitor.store.worker import STUCK_AFTER, StoreUnavailable, store_reason
from monitor.web.renders import Renders

log = logging.getLogger("monitor.app")


def _on_asyncio_loop() -> None:
    """Say so where an embedder runs the app on another loop (`uvicorn --loop auto` picks uvloop)."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, asyncio.BaseEventLoop):
        log.warning("running on %s.%s, not asyncio's own event loop: the monitor is built and measured on "
                    "asyncio's (`infermon serve` uses it); under uvloop its scrapes fell behind at 1,000 targets",
                    type(loop).__module__, type(loop).__qualname__)


def create_app(monitor: Monitor, schedule: bool = True) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        _on_asyncio_loop()
        scheduler = AsyncIOScheduler(timezone=UTC)
        app.state.scheduler = scheduler
        scheduler.add_listener(lambda event: _skipped(monitor, event), EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED)
        quiet_skips()
        _on_sighup(monitor)
        loops: list[asyncio.Task[object]] = []
        if schedule:
            for job in monitor.jobs:
                if job.cron is None:  # a daily run is not expected every few minutes
                    monitor.health.watch(job.name, job.interval_seconds)
                if job.loop is None:
                    _add_job(scheduler, monitor, job)
            scheduler.start()
            loops = [asyncio.create_task(_run_loop(monitor, job), name=job.name) for job in monitor.jobs if job.loop]
            loops.append(asyncio.create_task(monitor.loop_lag.run(), name="loop_lag"))
        try:
            yield
        finally:
            if scheduler.running:
                scheduler.shutdown(wait=False)
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
            await monitor.aclose()
            log.info("monitor stopped")

    app = FastAPI(title="inference-monitor", lifespan=lifespan)
    app.state.monitor = monitor

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:  # the background render's bytes (a fresh one before)
        latest = monitor.exposition.latest
        if latest is not None and "gzip" in request.headers.get("accept-encoding", ""):
            packed = await run_in_threadpool(latest.gzipped)  # once per render, off the loop
            return Response(packed, media_type=CONTENT_TYPE_LATEST,
                            headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
        if latest is not None and len(latest.chunks) > 1:  # sent piece by piece, never joined on the loop
            return StreamingResponse(_pieces(latest.chunks), media_type=CONTENT_TYPE_LATEST,
                                     headers={"Content-Length": str(latest.size)})
        return Response(monitor.metrics_text(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> Response:
        # Alive means collecting: a job that stopped or made no progress for a few intervals fails
        # the probe (Kubernetes restarts the pod), naming the job and why.
        problems = monitor.health.problems()
        if problems:
            return JSONResponse({"status": "failing", "jobs": problems}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        ready = monitor.ready
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)

    from monitor.quality.api import quality_router

    app.include_router(quality_router(monitor.settings, monitor.quality.store, monitor.store_io, monitor.wall))

    # The two large answers (megabytes on a large fleet) are encoded a piece at a time (jsonpieces).
    # The status and the page are made once for the readers that ask while one is made, and at
    # most two at once, so a flood of readers cannot starve /healthz (monitor/web/renders.py).
    renders = Renders()
    app.state.renders = renders

    @app.get("/api/v1/status", response_class=Response)
    async def status() -> Response:
        body = await renders.answer("/api/v1/status", None, lambda: status_bytes(monitor))
        return Response(body, media_type="application/json")

    @app.get("/api/v1/cost")
    async def cost() -> dict[str, object]:
        return cost_report(monitor.cost)

    @app.get("/api/v1/alerts", response_class=Response)
    async def alerts() -> Response:
        # The active alerts are in memory; the transitions are read from the store, which may be down
        # or locked: then a 503 at once with the reason (and the active alerts), not a 500 or a wait.
        active = await monitor.alerting.active_in_turns() if monitor.alerting else []
        try:
            transitions = await asyncio.wait_for(
                monitor.store_io.call(monitor.transitions, stuck_after=STUCK_AFTER), STUCK_AFTER)
        except TimeoutError:
            reason = f"the store did not answer within {STUCK_AFTER:g} s"
        except (SQLAlchemyError, StoreUnavailable) as exc:
            reason = redact_urls(store_reason(exc))  # as the store collector words it
        else:
            return await json_response({"active": active, "transitions": transitions})
        log.warning("GET /api/v1/alerts: the transitions cannot be read: %s", reason)
        return JSONResponse({"error": f"the alert history cannot be read now: {reason}", "active": active,
                             "transitions": None}, status_code=503)
    add_alertmanager_route(app, monitor.delivery, monitor.settings, monitor.explainer)
    log.info("write routes (POST /api/v1/alertmanager, /api/v1/samples): %s", write_access(monitor.settings).reason)
    from monitor.web.page import add_overview_routes

    add_overview_routes(app, monitor, renders)

    return app


async def status_bytes(monitor: Monitor) -> bytes:
    """GET /api/v1/status's body: made on the loop in turns, encoded a piece at a time."""
    return await json_in_pieces(await monitor.status_in_turns())


async def _pieces(chunks: tuple[bytes, ...]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def _on_sighup(monitor: Monitor) -> None:
    """SIGHUP reloads the configuration file (only where signals can be handled: the main thread)."""
    if monitor.config_path is None or threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals on this platform/loop
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, monitor.reload)


async def _run_loop(monitor: Monitor, job: Job) -> object:
    """A job that schedules itself (the service layer's spread scrapes). Its steps catch their own
    errors; should the loop still end, that is logged and fails /healthz, never hidden."""
    assert job.loop is not None
    try:
        result = await job.loop()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("job %s stopped", job.name)
        monitor.health.stopped(job.name, f"{type(exc).__name__}: {str(exc)[:300]}")
        raise
    monitor.health.stopped(job.name, "its loop returned")
    log.error("job %s stopped: its loop returned", job.name)
    return result


def _skipped(monitor: Monitor, event: JobEvent) -> None:
    """A run skipped because the last one still runs, or because the process was too busy to start
    it within its grace time (a run missed): counted (the scheduler's own warning for each skip is
    filtered out of the log, see `quiet_skips`; the job's lag shows in its health)."""
    monitor.health.job(event.job_id).skipped += 1


class _NoSkipLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "maximum number of running instances reached" not in message and " was missed by " not in message


def quiet_skips() -> None:
    """Under load the 1-s jobs are skipped every second, and APScheduler warns each time: one line
    per skip drowned the log. The count is inference_monitor_job_skipped_runs_total instead."""
    for name in ("apscheduler.scheduler", "apscheduler.executors.default"):
        scheduler_log = logging.getLogger(name)
        if not any(isinstance(f, _NoSkipLines) for f in scheduler_log.filters):
            scheduler_log.addFilter(_NoSkipLines())


def _add_job(scheduler: AsyncIOScheduler, monitor: Monitor, job: Job) -> None:
    async def run() -> None:
        try:
            await monitor.run_job(job)
        except asyncio.CancelledError:
            # Shutdown cancels a run in flight; that is not a job failure worth a traceback.
            log.debug("job %s cancelled", job.name)

    if job.cron is not None:
        from zoneinfo import ZoneInfo

        from apscheduler.triggers.cron import CronTrigger

        trigger = CronTrigger.from_crontab(job.cron, timezone=ZoneInfo(job.timezone))
        # A run missed while the process was down or busy still happens, once, within an hour.
        scheduler.add_job(run, trigger, id=job.name, name=job.name, max_instances=1, coalesce=True,
                          misfire_grace_time=3600)
        return
    scheduler.add_job(
        run,
        "interval",
        seconds=job.interval_seconds,
        id=job.name,
        name=job.name,
        next_run_time=datetime.now(UTC),
        max_instances=1,  # a slow run is skipped over, never stacked
        coalesce=True,
        misfire_grace_time=max(1, int(job.interval_seconds)),
    )
