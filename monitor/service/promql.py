"""The two PromQL functions our numbers must equal: `rate()`/`increase()` and `histogram_quantile()`.

Both follow Prometheus' promql/functions.go (extrapolatedRate) and promql/quantile.go
(bucketQuantile) so that a number on our /metrics page is the number an operator gets from
Prometheus on the same samples. Plain floats in, plain floats out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

Point = tuple[float, float]
"""(timestamp seconds, counter value)"""


def reset_corrected_delta(values: Sequence[float]) -> float:
    """last - first, adding back the value before every counter reset (an engine restart)."""
    delta = values[-1] - values[0]
    for previous, current in pairwise(values):
        if current < previous:
            delta += previous
    return delta


def extrapolated_increase(points: Sequence[Point], range_start: float, range_end: float) -> float | None:
    """Prometheus `increase(x[range])` evaluated at `range_end` over the points inside the range."""
    if len(points) < 2:
        return None
    delta = reset_corrected_delta([v for _, v in points])
    return extrapolate(delta, points[0][0], points[-1][0], points[0][1], len(points), range_start, range_end)


def extrapolate(
    delta: float, first_t: float, last_t: float, first_v: float, count: int, range_start: float, range_end: float
) -> float | None:
    """Stretch the reset-corrected `delta` between the first and last of `count` samples to the range.

    The increase is extrapolated towards the range edges, but by at most half an average sample
    interval when the series starts or ends well inside the range, and never to before the
    counter was zero (promql/functions.go, extrapolatedRate).
    """
    sampled = last_t - first_t
    if count < 2 or sampled <= 0:
        return None
    to_start = first_t - range_start
    to_end = range_end - last_t
    average_step = sampled / (count - 1)
    threshold = average_step * 1.1
    if to_start >= threshold:
        to_start = average_step / 2
    if delta > 0 and first_v >= 0:
        to_start = min(to_start, sampled * (first_v / delta))
    if to_end >= threshold:
        to_end = average_step / 2
    return delta * (sampled + to_start + to_end) / sampled


def extrapolated_rate(points: Sequence[Point], range_start: float, range_end: float) -> float | None:
    """Prometheus `rate(x[range])`: the extrapolated increase per second of the range."""
    increase = extrapolated_increase(points, range_start, range_end)
    if increase is None:
        return None
    return increase / (range_end - range_start)


Bucket = tuple[float, float]
"""(upper bound `le`, cumulative count)"""

def histogram_quantile(q: float, buckets: Sequence[Bucket]) -> float:
    """Prometheus `histogram_quantile(q, ...)` over classic buckets; NaN when there is no answer.

    Linear interpolation inside the bucket that holds the rank; the lowest bucket starts at 0
    (when its bound is positive); a rank in the +Inf bucket returns the highest finite bound.
    """
    return histogram_quantiles((q,), buckets)[0]


def histogram_quantiles(qs: Sequence[float], buckets: Sequence[Bucket]) -> list[float]:
    """Several quantiles of one histogram, sorting and repairing its buckets once."""
    ordered = _monotonic(sorted(buckets))
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return [_out_of_range(q) for q in qs]
    return [_quantile(q, ordered) for q in qs]


def _out_of_range(q: float) -> float:
    if q < 0:
        return -math.inf
    return math.inf if q > 1 else math.nan


def _quantile(q: float, ordered: list[Bucket]) -> float:
    if math.isnan(q) or q < 0 or q > 1:
        return _out_of_range(q)
    observations = ordered[-1][1]
    if observations == 0 or math.isnan(observations):
        return math.nan
    rank = q * observations
    index = next(i for i, (_, count) in enumerate(ordered) if count >= rank)
    if index == len(ordered) - 1:
        return ordered[-2][0]
    upper, count = ordered[index]
    if index == 0 and upper <= 0:
        return upper
    lower = 0.0
    if index > 0:
        lower, below = ordered[index - 1]
        count -= below
        rank -= below
    return lower + (upper - lower) * (rank / count)


def _monotonic(buckets: list[Bucket]) -> list[Bucket]:
    """Float sums of bucket rates can dip; Prometheus raises each count to the running max."""
    fixed: list[Bucket] = []
    highest = -math.inf
    for upper, count in buckets:
        if count > highest:
            highest = count
        fixed.append((upper, highest))
    return fixed


def fraction_at_or_below(threshold: float, buckets: Sequence[Bucket]) -> float:
    """Share of observations <= threshold, interpolating linearly inside a bucket the way
    histogram_quantile does (its inverse). NaN without observations."""
    ordered = _monotonic(sorted(buckets))
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return math.nan
    total = ordered[-1][1]
    if total == 0:
        return math.nan
    lower, below = 0.0, 0.0
    for upper, count in ordered:
        if threshold <= upper:
            if math.isinf(upper):
                return below / total
            share = (threshold - lower) / (upper - lower) if upper > lower else 1.0
            return (below + (count - below) * max(share, 0.0)) / total
        lower, below = upper, count
    return 1.0
