"""The infra layer as the monitor runs it (`monitor.layer.Layer`): its job, its families, its status section."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from monitor.infra.collector import InfraCollector, InfraStatus
from monitor.infra.render import render_infra
from monitor.layer import INFRA, Job


class InfraPart:
    """The GPUs: local ones through NVML (or a recorded trace) and dcgm-exporter targets."""

    name = INFRA

    def __init__(self, collector: InfraCollector) -> None:
        self.collector = collector
        self.jobs = (Job(INFRA, collector.settings.interval.seconds, collector.collect, collects=INFRA),)

    def render(self) -> Iterator[Metric]:
        return render_infra(self.collector.view)

    def status(self) -> InfraStatus:
        return self.collector.status()

    async def aclose(self) -> None:
        await self.collector.aclose()
