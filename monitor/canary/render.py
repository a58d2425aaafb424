"""Canary state -> metric families, per {probe, model} (fresh each scrape, no I/O)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from monitor.canary.collector import CanaryCollector
from monitor.canary.outcome import OUTCOMES
from monitor.catalog import family

# Our metric -> ProbeResult attribute: what the last probe measured (absent when it measured nothing).
_LAST = {
    "inference_canary_ttft_seconds": "ttft_seconds",
    "inference_canary_tpot_seconds": "tpot_seconds",
    "inference_canary_e2e_seconds": "e2e_seconds",
    "inference_canary_output_tokens": "output_tokens",
}


def render_canary(canary: CanaryCollector) -> Iterator[Metric]:
    up = family("inference_canary_up")
    failures = family("inference_canary_consecutive_failures")
    probes = family("inference_canary_probes_total")
    gap = family("inference_canary_ttft_gap_seconds")
    last = {metric: family(metric) for metric in _LAST}
    for name, state in canary.probes.items():
        labels = {"probe": name, "model": state.probe.model}
        for outcome in OUTCOMES:  # every outcome from the start, so increase() sees the first one
            probes.add_sample("inference_canary_probes_total", {**labels, "outcome": outcome},
                              float(state.counts[outcome]))
        result = state.last
        if result is None:
            continue  # not probed yet: no up, no numbers
        up.add_sample("inference_canary_up", labels, 1.0 if result.ok else 0.0)
        failures.add_sample("inference_canary_consecutive_failures", labels, float(state.consecutive_failures))
        for metric, attribute in _LAST.items():
            value = getattr(result, attribute)
            if value is not None:
                last[metric].add_sample(metric, labels, float(value))
        difference = canary.gap(state)
        if difference is not None and state.probe.target is not None:
            gap.add_sample("inference_canary_ttft_gap_seconds", {**labels, "target": state.probe.target}, difference)
    yield up
    yield failures
    yield probes
    yield from last.values()
    yield gap
