"""A fleet of N targets serving the same models, filled offline: what `bench.fleet_view`,
`bench.alert_eval` and the alerting tests assemble and evaluate.

One target's series store is filled from the page of one engine serving `models` models (through
the collector's own ingest), derived, and copied to N targets (each a copy of its own, as separate
stores give).
"""

from __future__ import annotations

import copy

import httpx

from monitor.config import load_settings
from monitor.health import HealthBook
from monitor.service.collector import ServiceCollector
from tests.support.pages import fleet_page, grown


def build(targets: int, models: int) -> tuple[ServiceCollector, float]:
    """The collector of `targets` targets, derived at the returned time."""
    text = fleet_page(engines=1, models=models)
    settings = load_settings(None, {"service": {
        "windows": ["1m", "5m"], "targets": [{"name": "t0", "url": "http://127.0.0.1:9/metrics"}]}}).service
    collector = ServiceCollector(settings, httpx.AsyncClient(), HealthBook(), own_clients=True)
    state = collector.targets["t0"]
    start = 1.8e9
    for step in range(120):  # two minutes at 1 s: the 1m window full, the 5m one filling
        collector.pipeline.ingest(state, grown(text, 1 + 0.01 * step), False, start + step)
    now = start + 119
    state.up = True
    state.derived = collector.pipeline.derive(state, now)
    for index in range(1, targets):
        clone = copy.copy(state)
        clone.derived = copy.deepcopy(state.derived)
        collector.targets[f"t{index}"] = clone
    return collector, now
