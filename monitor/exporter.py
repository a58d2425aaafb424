"""State -> /metrics: one custom collector on a private registry, fresh families per scrape.

Each layer contributes a render function that turns its latest view into families; nothing
here does I/O, so /metrics answers in milliseconds however broken the sources are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from monitor.catalog import family
from monitor.health import HealthBook

Renderer = Callable[[], Iterable[Metric]]


class MonitorExporter(Collector):
    def __init__(self, renderers: list[Renderer]) -> None:
        self.renderers = renderers

    def collect(self) -> Iterator[Metric]:
        for render in self.renderers:
            for fam in render():
                if fam.samples:  # an empty family would print a bare HELP/TYPE pair
                    yield fam

    def describe(self) -> list[Metric]:
        return []  # nothing to describe ahead of time: families depend on what was scraped


def make_registry(renderers: list[Renderer]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MonitorExporter(renderers))
    return registry


def render_text(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def render_health(book: HealthBook) -> Iterator[Metric]:
    success = family("inference_monitor_collector_success")
    duration = family("inference_monitor_collector_duration_seconds")
    last = family("inference_monitor_last_success_timestamp_seconds")
    for entry in book.entries.values():
        if not entry.present or entry.success is None:
            continue  # "not present" is not a failure: no series at all
        labels = {"collector": entry.collector, "target": entry.target}
        success.add_sample(success.name, labels, 1.0 if entry.success else 0.0)
        if entry.duration_seconds is not None:
            duration.add_sample(duration.name, labels, entry.duration_seconds)
        if entry.last_success is not None:
            last.add_sample(last.name, labels, entry.last_success)
    yield success
    yield duration
    yield last
