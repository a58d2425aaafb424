"""The cost layer as the monitor runs it (`monitor.layer.Layer`): its job, its families, its status section."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from monitor.cost.collector import CostCollector, CostStatus
from monitor.cost.render import render_cost
from monitor.layer import COST, INFRA, SERVICE, Job


class CostPart:
    """Spend from the GPUs' prices and the engines' tokens: derived after service and infra, on the
    service's interval."""

    name = COST

    def __init__(self, collector: CostCollector) -> None:
        self.collector = collector
        interval = collector.service.settings.scrape_interval.seconds
        self.jobs = (Job(COST, interval, collector.collect, collects=COST, after=(SERVICE, INFRA)),)

    def render(self) -> Iterator[Metric]:
        return render_cost(self.collector.view)

    def status(self) -> CostStatus:
        return self.collector.status()

    async def aclose(self) -> None:
        return None  # its store is the monitor's
