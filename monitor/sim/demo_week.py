"""The demo's compressed weeks: the history the demo's store starts with, so a trend shows at once.

A live demo runs minutes, a creep takes days. The demo therefore starts from three weeks of
5-minute points, as the monitor would have kept them, of two engines: the simulated one
(`vllm-sim`), whose P99 TTFT and TPOT have crept up by a few percent a day for the last six and a
half days, its KV-cache usage with them, at the same load (the cache, fragmenting: the story of the
simulator's `slow_decay` fault), ending at the levels the simulator shows live; and a neighbour
(`vllm-steady`, its history only: the demo does not scrape it) that follows the day and the week and
nothing else. Both have the rhythm of a real service (`monitor.sim.week`), and ±2 % noise.

The creep starts less than a week before the demo does: the same hours a week before are still
flat, so the week-over-week ratio still grows day over day, which is what tells a creep
(`TTFTP99Creep`) from a step.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from monitor.history.store import DAY, SLOTS, STEP, StoredDay
from monitor.sim.engine import DEFAULT_MODEL
from monitor.sim.week import Shape, growth, rhythm

DEMO_WEEK_DAYS = 21  # three weeks: the trend rules reach two weeks and a day back
CREEP_DAYS = 6.5  # since the creep began (under a week: the ratio to a week ago still grows)
NOISE = 0.02


@dataclass(frozen=True)
class SeededEngine:
    """One engine's seeded weeks: its levels when the demo starts and how fast its latency grew."""

    target: str
    model: str
    ttft_p99: float  # seconds, at the end of the seeded weeks
    tpot_p99: float
    requests_per_second: float
    kv_cache: float  # usage ratio at the end
    prefix_cache_hit: float
    creep_per_day: float = 0.0  # the latency's growth a day (0.04: +4 %), 0: steady
    kv_creep_per_day: float = 0.0


# The simulated engine's levels at the demo's 6 req/s (what /metrics shows between faults).
DEMO_WEEK_ENGINES = (
    SeededEngine("vllm-sim", DEFAULT_MODEL, ttft_p99=0.065, tpot_p99=0.025, requests_per_second=6.0,
                 kv_cache=0.3, prefix_cache_hit=0.27, creep_per_day=0.04, kv_creep_per_day=0.03),
    SeededEngine("vllm-steady", "Qwen/Qwen3-8B", ttft_p99=0.12, tpot_p99=0.03, requests_per_second=4.0,
                 kv_cache=0.25, prefix_cache_hit=0.4),
)


def demo_week(engines: Iterable[SeededEngine], now: float, days: float = DEMO_WEEK_DAYS,
              windows: Sequence[str] = ("1m", "5m"), seed: int = 41) -> list[StoredDay]:
    """Every closed 5-minute point of the `days` before `now`, as the history's day rows. The
    latencies under each of `windows` (the demo's rules read 1m, the overview 5m), the trend
    causes' series (requests/s, prefix-cache hits on 5m; KV-cache usage) as the monitor exports them."""
    rng = random.Random(seed)
    last = int(now // STEP) * STEP
    times = np.arange(last - int(days * DAY) // STEP * STEP + STEP, last + 1, STEP, dtype=float)
    out: list[StoredDay] = []
    for engine in engines:
        who = {"model": engine.model, "target": engine.target}
        creep = growth(engine.creep_per_day, now - CREEP_DAYS * DAY)
        kv_creep = growth(engine.kv_creep_per_day, now - CREEP_DAYS * DAY)
        latency = rhythm(1.0, day_swing=0.15, weekend=0.9)  # latency follows the load a little
        load = rhythm(1.0, day_swing=0.3, weekend=0.8)
        series: list[tuple[str, dict[str, str], float, Shape, Shape]] = []
        for window in windows:
            p99 = {**who, "quantile": "0.99", "window": window}
            series.append(("inference_ttft_seconds", p99, engine.ttft_p99, latency, creep))
            series.append(("inference_tpot_seconds", p99, engine.tpot_p99, latency, creep))
        series += [
            ("inference_requests_per_second", {**who, "window": "5m"}, engine.requests_per_second, load, flat),
            ("inference_kv_cache_usage_ratio", who, engine.kv_cache, load, kv_creep),
            ("inference_prefix_cache_hit_ratio", {**who, "window": "5m"}, engine.prefix_cache_hit, flat, flat),
        ]
        for name, labels, level, season, trend in series:
            values = _values(times, level, season, trend, now, rng)
            out.extend(_days(name, labels, times, values))
    return out


def flat(t: float) -> float:
    return 1.0


def _values(times: np.ndarray, level: float, season: Shape, trend: Shape, now: float,
            rng: random.Random) -> np.ndarray:
    """`level` at `now`'s trend, times the rhythm and the trend at each point, with noise."""
    base = level / trend(now)
    return np.array([base * season(t) * trend(t) * (1 + NOISE * rng.uniform(-1, 1)) for t in times])


def _days(name: str, labels: dict[str, str], times: np.ndarray, values: np.ndarray) -> list[StoredDay]:
    days: dict[int, np.ndarray] = {}
    for ts, value in zip(times, values, strict=True):
        day, slot = divmod(int(ts) // STEP, SLOTS)
        days.setdefault(day, np.full(SLOTS, np.nan))[slot] = value
    return [StoredDay(name, dict(labels), day, points) for day, points in sorted(days.items())]

