"""The quality layer as the monitor runs it (`monitor.layer.Layer`): its jobs, its families, its status section."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from monitor.layer import QUALITY, Job
from monitor.quality.layer import QualityLayer, QualityStatus
from monitor.quality.render import render_quality


class QualityPart:
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

    def status(self) -> QualityStatus:
        return self.layer.status()

    async def aclose(self) -> None:
        return None  # its store is the monitor's
