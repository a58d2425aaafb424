"""Prometheus `increase()` and `rate()` on one series' samples: the reference the tests hold the
monitor's windowed rates to (`monitor/service/series.py` computes them for many series at once).

Built on the scalar pieces of `monitor.service.promql` (the counter-reset correction and the
extrapolation to the range edges, promql/functions.go extrapolatedRate), which Prometheus' own
test vectors check in tests/service/test_promql.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.service.promql import extrapolate, reset_corrected_delta

Point = tuple[float, float]
"""(timestamp seconds, counter value)"""


def extrapolated_increase(points: Sequence[Point], range_start: float, range_end: float) -> float | None:
    """Prometheus `increase(x[range])` evaluated at `range_end` over the points inside the range."""
    if len(points) < 2:
        return None
    delta = reset_corrected_delta([v for _, v in points])
    return extrapolate(delta, points[0][0], points[-1][0], points[0][1], len(points), range_start, range_end)


def extrapolated_rate(points: Sequence[Point], range_start: float, range_end: float) -> float | None:
    """Prometheus `rate(x[range])`: the extrapolated increase per second of the range."""
    increase = extrapolated_increase(points, range_start, range_end)
    if increase is None:
        return None
    return increase / (range_end - range_start)
