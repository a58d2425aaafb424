"""The monitor assembled from settings: collectors as jobs, one health book, one registry.

Kept apart from FastAPI so tests (and `infermon check`) can run collection cycles directly
with an injected HTTP client and clock.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.core import Metric

from monitor import __version__
from monitor.catalog import family
from monitor.config import ConfigError, ServiceSettings, Settings, load_settings
from monitor.exporter import ExpositionCache, Renderer, TextWriter, make_registry, render_health, render_text
from monitor.health import HealthBook
from monitor.infra.collector import InfraCollector, import_pynvml
from monitor.infra.render import render_infra
from monitor.service.collector import ServiceCollector
from monitor.service.render import render_objectives, render_service
from monitor.service.schedule import Spreader, render_schedule
from monitor.service.scrape import pool_limits
from monitor.store.session import Store

log = logging.getLogger("monitor.runtime")


@dataclass
class ReloadState:
    """Like Prometheus' prometheus_config_last_reload_successful: did the last SIGHUP reload work."""

    successful: bool = True
    at: float | None = None
    error: str | None = None

    def failed(self, at: float, error: str) -> None:
        self.successful, self.at, self.error = False, at, error

    def succeeded(self, at: float) -> None:
        self.successful, self.at, self.error = True, at, None


def render_reload(state: ReloadState) -> Iterator[Metric]:
    fam = family("inference_monitor_config_last_reload_successful")
    fam.add_sample(fam.name, {}, 1.0 if state.successful else 0.0)
    yield fam


@dataclass
class Job:
    name: str
    interval_seconds: float
    run: Callable[[], Awaitable[Any]]
    ran: bool = False
    # Under `infermon serve`, a job with a loop runs it for its whole life instead of `run` on an interval.
    loop: Callable[[], Awaitable[Any]] | None = None


class Monitor:
    def __init__(
        self,
        settings: Settings,
        client: httpx.AsyncClient | None = None,
        wall: Callable[[], float] = time.time,
        load_nvml: Callable[[], Any] = import_pynvml,
        config_path: Path | None = None,
    ) -> None:
        self.settings = settings
        self.config_path = config_path
        self.reloads = ReloadState()
        self.wall = wall
        self.started = wall()
        self.health = HealthBook(wall=wall)
        self.store = Store(settings.storage.url)
        self.health.listeners.append(
            lambda entry, state: self.store.record_event(wall(), entry.collector, entry.target, state, entry.error)
        )
        self.client = client or httpx.AsyncClient(follow_redirects=True, trust_env=False,
                                                  limits=pool_limits(settings.service))
        self.cpu = ThreadPoolExecutor(1, thread_name_prefix="infermon-cpu")  # parse, derive, render
        self.spreader: Spreader | None = None
        self.service = ServiceCollector(settings.service, self.client, self.health, wall,
                                        own_clients=client is None)
        self.jobs = [Job("service", settings.service.scrape_interval.seconds, self.service.collect,
                         loop=self.run_service)]
        # infra: local GPUs (NVML, or the trace in infra.replay.file) and dcgm-exporter targets
        self.infra = InfraCollector(settings.infra, self.client, self.health, wall, load_nvml)
        self.jobs.append(Job("infra", settings.infra.interval.seconds, self.infra.collect))
        self.jobs.append(Job("retention", 3600.0, self.prune))
        renderers: list[Renderer] = [
            lambda: render_service(self.service.view),
            lambda: [render_objectives(self.service.view)],
            lambda: render_infra(self.infra.view),
            lambda: render_health(self.health),
            lambda: render_reload(self.reloads),
            lambda: render_schedule(self.spreader),
        ]
        self.registry = make_registry(renderers)
        self.writer = TextWriter()
        # What /metrics serves under `infermon serve`, and what in-process readers take:
        # `monitor.exposition.latest.body`, rendered once per publish tick in the worker thread.
        self.exposition = ExpositionCache(self.registry, wall)

    async def run_job(self, job: Job) -> None:
        try:
            await job.run()
        finally:
            job.ran = True

    async def run_once(self) -> None:
        for job in self.jobs:
            await self.run_job(job)

    def metrics_text(self) -> bytes:
        latest = self.exposition.latest
        if latest is not None:  # serving: the background render, never one on the event loop
            return latest.body
        return render_text(self.registry, self.writer)

    async def run_service(self) -> None:
        """`infermon serve`'s service layer: each target on its own cadence (Spreader), and a
        publish tick that assembles the view and renders /metrics in the worker thread."""
        self.spreader = Spreader(self.service, self.cpu, self.wall)
        # The worker thread holds the GIL for whole parses and renders; the loop waits for it after
        # every socket call, 5 ms each by default. 1 ms keeps /healthz answering in milliseconds.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, 0.001))
        # A full garbage collection stops both threads for its whole walk of the heap (0.1-0.5 s at
        # 1,000 targets): what lives for the process (modules, the app, then the targets' stores) is
        # frozen out of those walks. The data replaced on each scrape is acyclic: freed by refcount.
        gc.freeze()
        try:
            await asyncio.gather(self.spreader.run(), self._publish_loop(self.jobs[0]))
        finally:
            sys.setswitchinterval(switch)
            gc.unfreeze()

    async def _publish_loop(self, job: Job) -> None:
        period = min(self.settings.service.scrape_interval.seconds, self.settings.infra.interval.seconds)
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            self.service.refresh_targets()  # file_sd, on the loop: the spreader follows at once
            all_seen = self.spreader is not None and self.spreader.all_seen()
            try:
                await loop.run_in_executor(self.cpu, self.publish)
            except Exception:  # a bug in a renderer: keep scraping, keep the last good page, say so
                log.exception("publishing the service view and /metrics failed")
            if all_seen and not job.ran:
                job.ran = True  # ready once every target was tried and published
                gc.freeze()  # the targets' stores, parsers and pools, built in the first round
            await asyncio.sleep(max(0.0, period - (loop.time() - started)))

    def publish(self) -> None:
        """Assemble the service view and render /metrics (in the worker thread)."""
        self.service.view = self.service.assemble(self.wall())
        self.exposition.refresh()

    @property
    def ready(self) -> bool:
        return all(job.ran for job in self.jobs)

    def status(self) -> dict[str, Any]:
        return {
            "version": __version__,
            "started": self.started,
            "uptime_seconds": self.wall() - self.started,
            "ready": self.ready,
            "layers": {
                "service": {
                    "scrape_interval_seconds": self.settings.service.scrape_interval.seconds,
                    "windows": [w.text for w in self.settings.service.windows],
                    "last_derivation": self.service.view.ts,
                    "targets": self.service.status(),
                    "file_sd": self.service.discovery.status() if self.service.discovery else None,
                    "schedule": self.spreader.status() if self.spreader else None,
                },
                "infra": self.infra.status(),
            },
            "config": {"file": str(self.config_path) if self.config_path else None,
                       "last_reload_successful": self.reloads.successful, "last_reload": self.reloads.at,
                       "last_reload_error": self.reloads.error},
            "collectors": [entry.as_dict() for entry in self.health.entries.values()],
            "recent_events": self.store.recent_events(20),
        }

    def reload(self) -> bool:
        """SIGHUP: read the configuration file again. A broken file keeps the running configuration
        and says why; service targets and file_sd take effect at once, other sections at restart."""
        if self.config_path is None:
            return False
        try:
            fresh = load_settings(self.config_path)
        except ConfigError as exc:
            self.reloads.failed(self.wall(), str(exc))
            log.error("configuration reload failed, keeping the running configuration: %s", exc)
            return False
        self.service.reconfigure(fresh.service.targets, fresh.service.file_sd)
        later = [name for name in type(fresh).model_fields if name != "service"
                 and getattr(fresh, name) != getattr(self.settings, name)]
        later += [key for key in ServiceSettings.model_fields if key not in ("targets", "file_sd")
                  and getattr(fresh.service, key) != getattr(self.settings.service, key)]
        self.settings = self.settings.model_copy(update={"service": self.settings.service.model_copy(
            update={"targets": fresh.service.targets, "file_sd": fresh.service.file_sd})})
        self.reloads.succeeded(self.wall())
        log.info("configuration reloaded: %d static target(s), file_sd %s%s", len(fresh.service.targets),
                 fresh.service.file_sd or "none", f"; changed, applied at restart: {', '.join(later)}" if later else "")
        return True

    async def prune(self) -> None:
        self.store.prune(self.wall() - self.settings.storage.retention.seconds)

    async def aclose(self) -> None:
        self.store.close()
        await self.infra.aclose()
        await self.client.aclose()
        await self.service.aclose()
        self.cpu.shutdown(wait=False, cancel_futures=True)
