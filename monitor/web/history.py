"""The last hour of the headline series, for the overview's small charts.

A bounded ring per series, sampled after each cost tick (which follows the service and infra
collections): memory stays fixed however long the monitor runs. Prometheus keeps the real
history; this is only what the page needs to show a trend without one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

HOUR = 3600.0
MAX_POINTS = 720  # one hour at a 5 s interval; at 15 s the ring holds three hours and shows the last


@dataclass(frozen=True)
class Series:
    key: str
    title: str
    unit: str  # how the template formats a value: "rps", "tps", "s", "ratio", "usd_h"
    # Shown in this series' place while it has no points: what the fleet does give (llama.cpp's
    # page has no request count and no TTFT; its tokens/s and the canary's TTFT stand in).
    substitute: Series | None = None


HEADLINE = (
    Series("requests_per_second", "Fleet requests/s", "rps",
           Series("generation_tokens_per_second", "Fleet generated tokens/s", "tps")),
    Series("ttft_p99_seconds", "P99 TTFT", "s",
           Series("canary_ttft_seconds", "Canary TTFT (client-side; no engine TTFT)", "s")),
    Series("gpu_utilization_ratio", "GPU utilization", "ratio"),
    Series("usd_per_hour", "Spend $/hour", "usd_h"),
)
SAMPLED = tuple(s for headline in HEADLINE for s in (headline, headline.substitute) if s is not None)


@dataclass
class History:
    max_points: int = MAX_POINTS
    span_seconds: float = HOUR
    rings: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)

    def add(self, ts: float, values: dict[str, float | None]) -> None:
        """One sample per series; a missing value (no data yet, target down) leaves a gap."""
        for series in SAMPLED:
            value = values.get(series.key)
            if value is None:
                continue
            ring = self.rings.setdefault(series.key, deque(maxlen=self.max_points))
            if ring and ring[-1][0] >= ts:
                continue  # the same tick twice (run_once after a scheduled run): keep time increasing
            ring.append((ts, float(value)))

    def points(self, key: str, now: float) -> list[tuple[float, float]]:
        return [(t, v) for t, v in self.rings.get(key, ()) if t > now - self.span_seconds]


def mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None
