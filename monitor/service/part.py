"""The service layer as the monitor runs it (`monitor.layer.Layer`): its job, its families, its status section."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypedDict

from prometheus_client.core import Metric

from monitor.exporter import TextWriter
from monitor.layer import SERVICE, Job
from monitor.service.collector import ServiceCollector, TargetStatus
from monitor.service.discovery import DiscoveryStatus
from monitor.service.render import ServiceText, render_objectives, render_service
from monitor.service.schedule import ScheduleStatus, Spreader
from monitor.service.workers import WorkersStatus


class ServiceStatus(TypedDict):
    """/api/v1/status' "layers"."service"."""

    scrape_interval_seconds: float
    windows: list[str]
    last_derivation: float | None
    targets: list[TargetStatus]
    file_sd: DiscoveryStatus | None
    schedule: ScheduleStatus | None  # the spread scrapes, under `infermon serve`
    shard: dict[str, object] | None  # the settings' `service.shard`
    parse_workers: WorkersStatus | None


class ServicePart:
    """The engines' pages: scraped all at once by `run_once`, each on its own cadence under
    `infermon serve` (the monitor's loop: spread scrapes and a publish tick). The served page
    writes its families apart (`write_targets`), each target's lines kept until it is scraped again."""

    name = SERVICE

    def __init__(self, collector: ServiceCollector, loop: Callable[[], Awaitable[Any]],
                 schedule: Callable[[], Spreader | None]) -> None:
        """`schedule`: the loop's spread scrapes, once it runs."""
        self.collector = collector
        self.job = Job(SERVICE, collector.settings.scrape_interval.seconds, collector.collect, loop=loop,
                       collects=SERVICE)
        self.jobs = (self.job,)
        self.schedule = schedule
        self.text = ServiceText()

    def render(self) -> Iterator[Metric]:
        yield from render_service(self.collector.view)
        yield render_objectives(self.collector.view)

    def render_kept(self) -> Iterator[Metric]:
        """What the served page renders through the registry: the rest (`write_targets` writes the others)."""
        yield render_objectives(self.collector.view)

    def write_targets(self, writer: TextWriter, out: list[str]) -> None:
        self.text.render(self.collector.view, writer, out)

    def status(self, targets: list[TargetStatus] | None = None) -> ServiceStatus:
        """`targets`: each target's row, made already (on the loop in turns)."""
        collector, settings = self.collector, self.collector.settings
        return {
            "scrape_interval_seconds": settings.scrape_interval.seconds,
            "windows": [w.text for w in settings.windows],
            "last_derivation": collector.view.ts,
            "targets": collector.status() if targets is None else targets,
            "file_sd": collector.discovery.status() if collector.discovery else None,
            "schedule": spreader.status() if (spreader := self.schedule()) else None,
            "shard": shard.model_dump() if (shard := settings.shard) else None,
            "parse_workers": workers.status() if (workers := collector.workers) else None,
        }

    async def aclose(self) -> None:
        await self.collector.aclose()
