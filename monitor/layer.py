"""The shape the monitor's layers share, named: each runs jobs, renders its families on /metrics
and has a section in /api/v1/status, so the monitor loops over them instead of wiring each by hand.

A layer's collector knows its source and nothing of the monitor; the classes here adapt each to
the shape (its renderer imports the collector, so the collector cannot call it itself). Each
layer's view stays on its collector, typed: the pages and the alert context read it there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import Metric

from monitor.canary.collector import CanaryCollector
from monitor.canary.render import render_canary
from monitor.cost.collector import CostCollector
from monitor.cost.render import render_cost
from monitor.exporter import Renderer, TextWriter
from monitor.infra.collector import InfraCollector
from monitor.infra.render import render_infra
from monitor.quality.layer import QualityLayer
from monitor.quality.render import render_quality
from monitor.service.collector import ServiceCollector
from monitor.service.render import ServiceText, render_objectives, render_service
from monitor.service.schedule import Spreader

SERVICE, INFRA, QUALITY, CANARY, COST = "service", "infra", "quality", "canary", "cost"


@dataclass
class Job:
    name: str
    interval_seconds: float
    run: Callable[[], Awaitable[Any]]
    ran: bool = False
    cron: str | None = None  # a cron job (in `timezone`) instead of an interval; not part of readiness
    timezone: str = "UTC"
    # Under `infermon serve`, a job with a loop runs it for its whole life instead of `run` on an interval.
    loop: Callable[[], Awaitable[Any]] | None = None
    collects: str | None = None  # the layer whose view a run of this job brings up to date
    # The layers this one derives from: its first collection counts once theirs are in.
    after: tuple[str, ...] = ()


class Part(Protocol):
    """What the monitor loops over, in order: the jobs it schedules (and `run_once` runs one after
    another) and the families it renders on /metrics."""

    @property
    def name(self) -> str: ...

    @property
    def jobs(self) -> Sequence[Job]: ...

    def render(self) -> Iterable[Metric]: ...


class Layer(Part, Protocol):
    """One layer of the monitor (node_exporter's `Collector`): a part with its own section in
    /api/v1/status and connections to close."""

    def status(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


def _no_families() -> Iterable[Metric]:
    return ()


@dataclass(frozen=True)
class OwnPart:
    """One of the monitor's own parts between the layers: its health book, the outbox, the store."""

    name: str
    render: Renderer = _no_families
    jobs: tuple[Job, ...] = ()


class Service:
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

    def status(self, targets: list[dict[str, object]] | None = None) -> dict[str, Any]:
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


class Infra:
    """The GPUs: local ones through NVML (or a recorded trace) and dcgm-exporter targets."""

    name = INFRA

    def __init__(self, collector: InfraCollector) -> None:
        self.collector = collector
        self.jobs = (Job(INFRA, collector.settings.interval.seconds, collector.collect, collects=INFRA),)

    def render(self) -> Iterator[Metric]:
        return render_infra(self.collector.view)

    def status(self) -> dict[str, Any]:
        return self.collector.status()

    async def aclose(self) -> None:
        await self.collector.aclose()


class Quality:
    """The daily judge run (a cron job) and the view of the latest stored runs, re-read on an interval."""

    name = QUALITY

    def __init__(self, layer: QualityLayer) -> None:
        self.layer = layer
        settings = layer.settings
        jobs = [Job("quality_refresh", settings.refresh_interval.seconds, layer.refresh, collects=QUALITY),
                Job("quality_retention", 3600.0, layer.prune)]
        if settings.enabled:
            jobs.append(Job("quality_run", 86400.0, layer.run, cron=settings.schedule, timezone=settings.timezone))
        self.jobs = tuple(jobs)

    def render(self) -> Iterator[Metric]:
        return render_quality(self.layer.view, self.layer.wall())

    def status(self) -> dict[str, Any]:
        return self.layer.status()

    async def aclose(self) -> None:
        return None  # its store is the monitor's


class Canary:
    """Synthetic users through the OpenAI-compatible API; its job only starts the probes that are due."""

    name = CANARY

    def __init__(self, collector: CanaryCollector) -> None:
        self.collector = collector
        probes = collector.settings.probes
        self.jobs = (Job(CANARY, collector.tick_seconds, collector.dispatch),) if probes else ()

    def render(self) -> Iterator[Metric]:
        return render_canary(self.collector)

    def status(self) -> dict[str, Any]:
        return self.collector.status()

    async def aclose(self) -> None:
        await self.collector.aclose()


class Cost:
    """Spend from the GPUs' prices and the engines' tokens: derived after service and infra, on the
    service's interval."""

    name = COST

    def __init__(self, collector: CostCollector) -> None:
        self.collector = collector
        interval = collector.service.settings.scrape_interval.seconds
        self.jobs = (Job(COST, interval, collector.collect, collects=COST, after=(SERVICE, INFRA)),)

    def render(self) -> Iterator[Metric]:
        return render_cost(self.collector.view)

    def status(self) -> dict[str, Any]:
        return self.collector.status()

    async def aclose(self) -> None:
        return None  # its store is the monitor's
