"""The monitor scraping two pages of one target, STEP seconds apart, from a real loopback HTTP server;
and the PromQL reference numbers over the same two pages (`rate()` per series as Prometheus takes
it, `histogram_quantile` over the buckets' rates)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from monitor.config import load_settings
from monitor.promtext import go_float
from monitor.runtime import Monitor
from monitor.service.promql import histogram_quantile
from tests.support.pageserver import Generated, PageServer
from tests.support.promql_oracle import extrapolated_rate

START, STEP, WINDOW = 1_700_000_000.0, 15.0, 60.0
Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass
class Scraped:
    first: str
    second: str
    exported: Samples

    def one(self, metric: str, **labels: str) -> float:
        found = [v for lab, v in self.exported.get(metric, []) if all(lab.get(k) == w for k, w in labels.items())]
        assert len(found) == 1, (metric, labels, self.exported.get(metric))
        return found[0]

    def rate(self, sample: str, keep: dict[str, str] | None = None) -> float:
        """sum(rate(sample[1m])) at the second scrape, per series first, as Prometheus evaluates it."""
        before, after = _series(self.first, sample, keep), _series(self.second, sample, keep)
        end = START + STEP
        total = 0.0
        for key, value in after.items():
            rate = extrapolated_rate([(START, before[key]), (end, value)], end - WINDOW, end)
            assert rate is not None
            total += rate
        return total

    def quantile(self, q: float, base: str, scale: float = 1.0) -> float:
        """histogram_quantile(q, sum by (le) (rate(base_bucket[1m]))) * scale."""
        by_le: dict[float, float] = defaultdict(float)
        for labels in _series(self.second, f"{base}_bucket", None):
            le = dict(labels)["le"]
            by_le[go_float(le)] += self.rate(f"{base}_bucket", {**dict(labels)})
        return histogram_quantile(q, sorted(by_le.items())) * scale


def _series(text: str, sample: str, keep: dict[str, str] | None) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in (keep or {}).items()):
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def scrape(first: str, second: str) -> Scraped:
    """The monitor's /metrics after scraping `first` at START and `second` STEP seconds later."""
    pages = [first, second]
    with PageServer() as server:
        url = server.set("/metrics", Generated(lambda hit: pages[min(hit, 2) - 1]))
        settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                        "service": {"windows": ["1m"], "targets": [{"name": "t", "url": url}]}})
        clock = [START]
        monitor = Monitor(settings, wall=lambda: clock[0])

        async def cycles() -> str:
            await asyncio.wait_for(monitor.run_once(), 10)
            clock[0] += STEP
            await asyncio.wait_for(monitor.run_once(), 10)
            await monitor.aclose()
            return monitor.metrics_text().decode()

        text = asyncio.run(cycles())
    exported: Samples = defaultdict(list)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.labels.get("target") == "t":
                exported[s.name].append((dict(s.labels), s.value))
    return Scraped(first, second, exported)
