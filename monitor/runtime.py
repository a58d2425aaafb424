"""The monitor assembled from settings: collectors as jobs, one health book, one registry.

Kept apart from FastAPI so tests (and `infermon check`) can run collection cycles directly
with an injected HTTP client and clock.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from monitor import __version__
from monitor.config import Settings
from monitor.exporter import Renderer, TextWriter, make_registry, render_health, render_text
from monitor.health import HealthBook
from monitor.infra.collector import InfraCollector, import_pynvml
from monitor.infra.render import render_infra
from monitor.quality.layer import QualityLayer
from monitor.quality.render import render_quality
from monitor.service.collector import ServiceCollector
from monitor.service.render import render_objectives, render_service
from monitor.store.quality import QualityStore
from monitor.store.session import Store


@dataclass
class Job:
    name: str
    interval_seconds: float
    run: Callable[[], Awaitable[Any]]
    ran: bool = False
    cron: str | None = None  # a cron job (in `timezone`) instead of an interval; not part of readiness
    timezone: str = "UTC"


class Monitor:
    def __init__(
        self,
        settings: Settings,
        client: httpx.AsyncClient | None = None,
        wall: Callable[[], float] = time.time,
        load_nvml: Callable[[], Any] = import_pynvml,
    ) -> None:
        self.settings = settings
        self.wall = wall
        self.started = wall()
        self.health = HealthBook(wall=wall)
        self.store = Store(settings.storage.url)
        self.health.listeners.append(
            lambda entry, state: self.store.record_event(wall(), entry.collector, entry.target, state, entry.error)
        )
        self.client = client or httpx.AsyncClient(follow_redirects=True, trust_env=False)
        self.service = ServiceCollector(settings.service, self.client, self.health, wall)
        self.jobs = [Job("service", settings.service.scrape_interval.seconds, self.service.collect)]
        # infra: local GPUs (NVML, or the trace in infra.replay.file) and dcgm-exporter targets
        self.infra = InfraCollector(settings.infra, self.client, self.health, wall, load_nvml)
        self.jobs.append(Job("infra", settings.infra.interval.seconds, self.infra.collect))
        self.jobs.append(Job("retention", 3600.0, self.prune))
        # quality: the daily judge run (cron), and the view of the latest stored runs
        self.quality = QualityLayer(settings.quality, QualityStore(self.store.engine), self.health, wall)
        self.jobs.append(Job("quality_refresh", settings.quality.refresh_interval.seconds, self.quality.refresh))
        self.jobs.append(Job("quality_retention", 3600.0, self.quality.prune))
        if settings.quality.enabled:
            self.jobs.append(Job("quality_run", 86400.0, self.quality.run, cron=settings.quality.schedule,
                                 timezone=settings.quality.timezone))
        renderers: list[Renderer] = [
            lambda: render_service(self.service.view),
            lambda: [render_objectives(self.service.view)],
            lambda: render_infra(self.infra.view),
            lambda: render_health(self.health),
            lambda: render_quality(self.quality.view, wall()),
        ]
        self.registry = make_registry(renderers)
        self.writer = TextWriter()

    async def run_job(self, job: Job) -> None:
        try:
            await job.run()
        finally:
            job.ran = True

    async def run_once(self) -> None:
        for job in self.jobs:
            if job.cron is None:  # a daily run is not part of one collection cycle
                await self.run_job(job)

    def metrics_text(self) -> bytes:
        return render_text(self.registry, self.writer)

    @property
    def ready(self) -> bool:
        return all(job.ran for job in self.jobs if job.cron is None)

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
                },
                "infra": self.infra.status(),
                "quality": self.quality.status(),
            },
            "collectors": [entry.as_dict() for entry in self.health.entries.values()],
            "recent_events": self.store.recent_events(20),
        }

    async def prune(self) -> None:
        self.store.prune(self.wall() - self.settings.storage.retention.seconds)

    async def aclose(self) -> None:
        self.store.close()
        await self.infra.aclose()
        await self.client.aclose()
