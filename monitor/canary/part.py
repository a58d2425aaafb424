"""The canary as the monitor runs it (`monitor.layer.Layer`): its job, its families, its status section."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from monitor.canary.collector import CanaryCollector, CanaryStatus
from monitor.canary.render import render_canary
from monitor.layer import CANARY, Job


class CanaryPart:
    """Synthetic users through the OpenAI-compatible API; its job only starts the probes that are due."""

    name = CANARY

    def __init__(self, collector: CanaryCollector) -> None:
        self.collector = collector
        probes = collector.settings.probes
        self.jobs = (Job(CANARY, collector.tick_seconds, collector.dispatch),) if probes else ()

    def render(self) -> Iterator[Metric]:
        return render_canary(self.collector)

    def status(self) -> CanaryStatus:
        return self.collector.status()

    async def aclose(self) -> None:
        await self.collector.aclose()
