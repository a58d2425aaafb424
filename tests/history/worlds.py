"""Weeks of the monitor's own series, 5-minute points, for the trend rules.

Every world has a day and a week in it (busy afternoons, quiet weekends: the same every week),
a little seeded noise, and then what sets it apart: nothing (seasonal), a creep of a few percent
a day from some point on, or a one-time step. Written as OpenMetrics (for a real Prometheus,
through `promtool tsdb create-blocks-from openmetrics`), as stored days (for the history) or as
a `Tracks` history of numpy tracks (for the trend evaluator alone).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from monitor.history.store import DAY, SLOTS, STEP, StoredDay
from monitor.rulefiles.promql import Track
from monitor.sim.week import growth, rhythm, step

__all__ = ["DAY", "WEEK", "Tracks", "World", "creeping", "openmetrics", "seasonal", "stepped", "stored_days"]

WEEK = 7 * DAY
LabelTuple = tuple[tuple[str, str], ...]


def seasonal(base: float, day_swing: float = 0.3, weekend: float = 0.8) -> Callable[[float], float]:
    """A value that follows the hour of the day and the day of the week, the same every week."""
    return rhythm(base, day_swing, weekend)


def creeping(shape: Callable[[float], float], start: float, per_day: float) -> Callable[[float], float]:
    """`shape`, growing by `per_day` (0.04: +4 %) a day, compounded, from `start` on."""
    grown = growth(per_day, start)
    return lambda t: shape(t) * grown(t)


def stepped(shape: Callable[[float], float], at: float, factor: float) -> Callable[[float], float]:
    stepped_up = step(factor, at)
    return lambda t: shape(t) * stepped_up(t)


@dataclass(frozen=True)
class World:
    name: str  # the metric
    series: Mapping[LabelTuple, Callable[[float], float]]  # labels -> value at t
    noise: float = 0.02

    def points(self, start: float, end: float, seed: int = 7) -> dict[LabelTuple, list[tuple[float, float]]]:
        """Every series' points on the 5-minute grid in [start, end]."""
        rng = random.Random(seed)
        first = math.ceil(start / STEP) * STEP
        out: dict[LabelTuple, list[tuple[float, float]]] = {}
        for labels, value in self.series.items():
            out[labels] = [(float(t), value(t) * (1 + self.noise * rng.uniform(-1, 1)))
                           for t in range(int(first), int(end) + 1, STEP)]
        return out


def openmetrics(worlds: Iterable[World], start: float, end: float) -> str:
    lines = []
    for world in worlds:
        lines.append(f"# TYPE {world.name} gauge")
        for labels, points in world.points(start, end).items():
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines.extend(f"{world.name}{{{text}}} {value!r} {ts:.0f}" for ts, value in points)
    return "\n".join(lines) + "\n# EOF\n"


def stored_days(worlds: Iterable[World], start: float, end: float) -> list[StoredDay]:
    out: list[StoredDay] = []
    for world in worlds:
        for labels, points in world.points(start, end).items():
            days: dict[int, np.ndarray] = {}
            for ts, value in points:
                day, slot = divmod(int(ts) // STEP, SLOTS)
                days.setdefault(day, np.full(SLOTS, np.nan))[slot] = value
            out.extend(StoredDay(world.name, dict(labels), day, values) for day, values in sorted(days.items()))
    return out


class Tracks:
    """The worlds' points as the trend evaluator's history (`monitor.rulefiles.promql.History`):
    numpy tracks by metric, without a store or a keeper in between."""

    def __init__(self, worlds: Iterable[World], start: float, end: float, seed: int = 7) -> None:
        self.by_name: dict[str, list[Track]] = {}
        for world in worlds:
            for labels, points in world.points(start, end, seed).items():
                at = np.array(points, dtype=float)
                self.by_name.setdefault(world.name, []).append(
                    Track({"__name__": world.name, **dict(labels)}, at[:, 0].copy(), at[:, 1].copy()))

    def tracks(self, name: str) -> list[Track]:
        return self.by_name.get(name, [])

