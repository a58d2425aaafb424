"""A service's week as multipliers of time: the daily and weekly rhythm every real service has,
and the slow changes a trend must tell from it (a creep of a few percent a day, a one-time step).
The scorecard's trend worlds (tests/support/trend_scenarios.py) and the history tests model the monitor's
series with them."""

from __future__ import annotations

import math
from collections.abc import Callable

DAY = 86400.0
Shape = Callable[[float], float]  # a value (or a multiplier) at time t


def rhythm(base: float, day_swing: float = 0.3, weekend: float = 0.8) -> Shape:
    """Busy afternoons, quiet weekends: the same every week."""
    def value(t: float) -> float:
        hour = (t % DAY) / DAY
        weekday = int(t // DAY + 3) % 7  # 1970-01-01 was a Thursday: 0 is Monday
        return base * (1 + day_swing * math.sin(2 * math.pi * (hour - 0.25))) * (weekend if weekday >= 5 else 1.0)
    return value


def growth(per_day: float, start: float, stop: float | None = None) -> Shape:
    """1 until `start`, then growing by `per_day` (0.04: +4 %) a day, compounded; flat again from
    `stop` on (a creep that stops: a restart cleared the fragmentation, a fix went out)."""
    def value(t: float) -> float:
        until = t if stop is None else min(t, stop)
        return float((1 + per_day) ** (max(0.0, until - start) / DAY))
    return value


def holiday(at: float, factor: float = 0.7, length: float = DAY) -> Shape:
    """`factor` for `length` seconds from `at` (a holiday's quiet day: latency at 0.7 of usual with
    the traffic at 30 %; an outage: 3.0 for a few hours), 1 before and after."""
    return lambda t: factor if at <= t < at + length else 1.0


def product(*shapes: Shape) -> Shape:
    """The shapes multiplied: a rhythm with a step and then a creep."""
    return lambda t: math.prod(shape(t) for shape in shapes)


def step(factor: float, at: float) -> Shape:
    """1 until `at`, then `factor`."""
    return lambda t: factor if t >= at else 1.0
