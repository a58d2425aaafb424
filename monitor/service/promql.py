"""The two PromQL functions our numbers must equal: `rate()`/`increase()` and `histogram_quantile()`.

Both follow Prometheus' promql/functions.go (extrapolatedRate) and promql/quantile.go
(bucketQuantile) so that a number on our /metrics page is the number an operator gets from
Prometheus on the same samples. Plain floats in, plain floats out.
"""

from __future__ import annotations

import math
import sys
from bisect import bisect_left
from collections.abc import Sequence
from itertools import pairwise
from operator import itemgetter

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]


def reset_corrected_delta(values: Sequence[float]) -> float:
    """last - first, adding back the value before every counter reset (an engine restart)."""
    delta = values[-1] - values[0]
    for previous, current in pairwise(values):
        if current < previous:
            delta += previous
    return delta


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


Bucket = tuple[float, float]
"""(upper bound `le`, cumulative count)"""

# Relative difference under which two bucket counts are the same count (float noise of summed
# rates), Prometheus >= 2.49's smallDeltaTolerance; util/almost's smallest normal float below.
SMALL_DELTA_TOLERANCE = 1e-12
_MIN_NORMAL = 2.2250738585072014e-308


def histogram_quantile(q: float, buckets: Sequence[Bucket]) -> float:
    """Prometheus `histogram_quantile(q, ...)` over classic buckets; NaN when there is no answer.

    Linear interpolation inside the bucket that holds the rank; the lowest bucket starts at 0
    (when its bound is positive); a rank in the +Inf bucket returns the highest finite bound.
    """
    return histogram_quantiles((q,), buckets)[0]


def histogram_quantiles(qs: Sequence[float], buckets: Sequence[Bucket]) -> list[float]:
    """Several quantiles of one histogram, sorting and repairing its buckets once.

    Prometheus 3.x promql/quantile.go BucketQuantile: sort, require +Inf, merge buckets whose
    bounds are equal however they were written (`0.2`, `2e-1`), repair monotonicity (ignoring
    relative differences below 1e-12), then interpolate.
    """
    ordered = _repaired(buckets)
    if ordered is None or len(ordered) < 2:
        return [_out_of_range(q) for q in qs]
    return [_quantile(q, ordered) for q in qs]


def _repaired(buckets: Sequence[Bucket]) -> list[Bucket] | None:
    """Sorted, coalesced and monotonic buckets; None without a +Inf bucket."""
    if not buckets:
        return None
    ordered = sorted(buckets, key=itemgetter(0))
    if not math.isinf(ordered[-1][0]) or ordered[-1][0] < 0:
        return None
    return _monotonic(_coalesce(ordered))


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
    # Go's sort.Search over all but +Inf, as Prometheus does: the first bucket whose count reaches
    # the rank (the repaired counts rise), or the +Inf bucket when none does.
    index = bisect_left(ordered, True, hi=len(ordered) - 1, key=lambda bucket: bucket[1] >= rank)
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
    return lower + (upper - lower) * _go_divide(rank, count)


def _go_divide(a: float, b: float) -> float:
    """a / b as Go (and numpy) divide floats: x / 0 is an infinity and 0 / 0 is NaN, not an error
    (`histogram_quantile(0, ...)` over an empty lowest bucket, or a rank that underflowed to 0)."""
    if b:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _coalesce(ordered: list[Bucket]) -> list[Bucket]:
    """Buckets with the same bound (sorted input) become one, their counts summed."""
    if len({upper for upper, _ in ordered}) == len(ordered):
        return ordered  # no two alike (the usual page): nothing to merge
    merged: list[Bucket] = [ordered[0]]
    for upper, count in ordered[1:]:
        if upper == merged[-1][0]:
            merged[-1] = (upper, merged[-1][1] + count)
        else:
            merged.append((upper, count))
    return merged


def _monotonic(buckets: list[Bucket]) -> list[Bucket]:
    """Float sums of bucket rates can dip; Prometheus raises each count to the last kept count.

    A count within a relative 1e-12 of the last kept one is that count (either direction);
    a lower count is raised to it; neither moves the kept count (ensureMonotonicAndIgnoreSmallDeltas).
    """
    fixed: list[Bucket] = [buckets[0]]
    kept = buckets[0][1]
    for upper, count in buckets[1:]:
        if count < kept or (count != kept and not _clearly_above(kept, count) and _almost_equal(kept, count)):
            count = kept
        kept = count
        fixed.append((upper, count))
    return fixed


def _clearly_above(kept: float, count: float) -> bool:
    """`count` (> `kept`) is twice the tolerance away or more: not almost equal, without the full
    test. Only for normal, finite positives; anything else goes to `_almost_equal`."""
    return kept >= _MIN_NORMAL and count - kept >= 2 * SMALL_DELTA_TOLERANCE * (count + kept)


def _almost_equal(a: float, b: float) -> bool:
    # prometheus util/almost.Equal with epsilon = SMALL_DELTA_TOLERANCE.
    if (math.isnan(a) and math.isnan(b)) or a == b:
        return True
    total = abs(a) + abs(b)
    diff = abs(a - b)
    if a == 0 or b == 0 or total < _MIN_NORMAL:
        return diff < SMALL_DELTA_TOLERANCE * _MIN_NORMAL
    return diff / min(total, sys.float_info.max) < SMALL_DELTA_TOLERANCE


def histogram_fraction(lower: float, upper: float, buckets: Sequence[Bucket]) -> float:
    """Prometheus 3.x `histogram_fraction(lower, upper, ...)` over classic buckets (BucketFraction).

    The share of observations between the bounds, interpolating linearly inside a bucket (the
    inverse of histogram_quantile). NaN without observations or with a NaN bound; the +Inf bucket
    contributes nothing to a finite bound, so a histogram with only +Inf gives 0 there.
    """
    ordered = sorted(buckets, key=lambda b: b[0])
    if not ordered or not math.isinf(ordered[-1][0]) or ordered[-1][0] < 0:
        return math.nan
    ordered = _coalesce(ordered)
    total = ordered[-1][1]
    if total == 0 or math.isnan(lower) or math.isnan(upper):
        return math.nan
    if lower >= upper:
        return 0.0
    lower_rank = _rank_at(lower, ordered)
    upper_rank = _rank_at(upper, ordered)
    return (min(upper_rank, total) - min(lower_rank, total)) / total


def _rank_at(value: float, ordered: list[Bucket]) -> float:
    """How many observations lie below `value`, interpolated inside its bucket."""
    rank = 0.0
    bucket_start = 0.0 if ordered[0][0] > 0 else -math.inf
    for index, (upper, count) in enumerate(ordered):
        if index > 0:
            bucket_start = ordered[index - 1][0]
        if bucket_start >= value:
            return rank
        if upper > value:
            if bucket_start == -math.inf:
                return count  # no interpolation inside an infinitely wide bucket
            return rank + (count - rank) * (value - bucket_start) / (upper - bucket_start)
        rank = count
    return ordered[-1][1]


def fraction_at_or_below(threshold: float, buckets: Sequence[Bucket]) -> float:
    """Share of observations <= threshold: `histogram_fraction(-Inf, threshold, ...)` (SLO attainment)."""
    return histogram_fraction(-math.inf, threshold, buckets)


def below_first_bound(buckets: Sequence[Bucket]) -> float | None:
    """The first bucket's bound when every observation fell in it, else None (nothing observed,
    or some above it). histogram_quantile() then answers a share of that bound (P50: half of it,
    interpolated from 0), which is what we export; a reader shows "< bound", what the histogram
    actually says."""
    ordered = _repaired(buckets)
    if ordered is None or len(ordered) < 2 or not 0 < ordered[0][0] < math.inf:
        return None
    total = ordered[-1][1]
    return ordered[0][0] if total > 0 and ordered[0][1] >= total * (1 - 1e-9) else None


# Many histograms with the same bucket bounds at once (a derivation's ~140: models x windows x
# histograms), with numpy: the same numbers as the functions above, row by row. A row the vector
# path cannot match exactly (a non-finite or negative count, or a rise within the small-delta
# tolerance, where Prometheus' repair depends on the order it walks) goes through them instead.

def first_bounds_holding_all(bounds: Sequence[float], counts: Floats) -> list[float | None]:
    """`below_first_bound` of each row of `counts` (one histogram a row, on sorted `bounds` that end
    at +Inf), in one numpy pass."""
    if len(bounds) < 2 or not 0 < bounds[0] < math.inf or not math.isinf(bounds[-1]):
        return [None] * len(counts)
    total = counts[:, -1]
    held = (total > 0) & (counts[:, 0] >= total * (1 - 1e-9))
    return [bounds[0] if all_in else None for all_in in held.tolist()]


def bucket_quantiles(qs: Sequence[float], bounds: Sequence[float], counts: Floats) -> Floats:
    """`histogram_quantiles(qs, zip(bounds, row))` for every row of `counts` (histograms x buckets).

    `bounds` are distinct and ascending: the keys of a bucket-rate dict, sorted.
    """
    n_rows, n = counts.shape
    out = np.empty((n_rows, len(qs)))
    if any(math.isnan(b) for b in bounds):  # no order to vectorise over: each on its own
        out[:] = [histogram_quantiles(qs, list(zip(bounds, row, strict=True))) for row in counts.tolist()]
        return out
    if n < 2 or not math.isinf(bounds[-1]) or bounds[-1] < 0:
        out[:] = [_out_of_range(q) for q in qs]
        return out
    upper_bounds = np.broadcast_to(np.asarray(bounds, dtype=np.float64), counts.shape)
    return _vector_quantiles(qs, bounds, upper_bounds, counts, np.full(n_rows, n - 1))


def ragged_bucket_quantiles(qs: Sequence[float], groups: Sequence[tuple[Sequence[float], Floats]]) -> list[Floats]:
    """`bucket_quantiles(qs, bounds, counts)` of each group, in one numpy pass for all the groups
    it vectorises (ascending bounds without NaN, two or more, the last +Inf): numpy's cost per call,
    not the rows, is what a derivation's few dozen histograms per set of bounds pay.

    Each row is padded on the right to the widest group's width with copies of its +Inf bucket
    (bound +Inf, its count). A quantile's search then stops at the row's own +Inf bucket at the
    latest (its count, the total, reaches every rank q * total with 0 <= q <= 1), so each row gives
    exactly what its group alone gives.
    """
    out: list[Floats | None] = [None] * len(groups)
    merged = []
    for at, (bounds, counts) in enumerate(groups):
        if len(bounds) >= 2 and math.isinf(bounds[-1]) and bounds[-1] > 0 and not any(math.isnan(b) for b in bounds):
            merged.append(at)
        else:
            out[at] = bucket_quantiles(qs, bounds, counts)
    if merged:
        width = max(len(groups[at][0]) for at in merged)
        total_rows = sum(groups[at][1].shape[0] for at in merged)
        padded, upper_bounds = np.empty((total_rows, width)), np.empty((total_rows, width))
        last = np.empty(total_rows, dtype=np.int64)
        row = 0
        for at in merged:
            bounds, counts = groups[at]
            n_rows, n = counts.shape
            block = slice(row, row + n_rows)
            padded[block, :n], padded[block, n:] = counts, counts[:, n - 1 :]
            upper_bounds[block, :n], upper_bounds[block, n:] = bounds, math.inf
            last[block] = n - 1
            row += n_rows
        every = _vector_quantiles(qs, None, upper_bounds, padded, last)
        row = 0
        for at in merged:
            n_rows = groups[at][1].shape[0]
            out[at] = every[row : row + n_rows]
            row += n_rows
    return [found for found in out if found is not None]


def _vector_quantiles(
    qs: Sequence[float], bounds: Sequence[float] | None, upper_bounds: Floats, counts: Floats,
    last: npt.NDArray[np.int64],
) -> Floats:
    """The vector path of `bucket_quantiles`: `upper_bounds` per row (histograms x buckets), each
    row's +Inf bucket at `last`; a row it cannot match exactly is walked on its own bounds (the
    first `last + 1` of its row, or `bounds` where given)."""
    n_rows = counts.shape[0]
    out = np.empty((n_rows, len(qs)))
    repaired = np.maximum.accumulate(counts, axis=1)
    exact = _vector_exact(counts, repaired)
    total = repaired[:, -1]
    rows = np.arange(n_rows)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for column, q in enumerate(qs):
            if math.isnan(q) or q < 0 or q > 1:
                out[:, column] = _out_of_range(q)
                continue
            rank = q * total
            # Go's sort.Search over all but +Inf: the first bucket whose count reaches the rank.
            reach = repaired[:, :-1] >= rank[:, None]
            index = np.where(reach.any(axis=1), reach.argmax(axis=1), last)
            upper = upper_bounds[rows, index]
            count = repaired[rows, index]
            inside = index > 0
            below = np.where(inside, repaired[rows, index - 1], 0.0)
            lower = np.where(inside, upper_bounds[rows, index - 1], 0.0)
            value = lower + (upper - lower) * ((rank - below) / (count - below))
            value = np.where(index == last, upper_bounds[rows, last - 1], value)
            value = np.where((index == 0) & (upper <= 0), upper, value)
            out[:, column] = np.where(total == 0, math.nan, value)
    for row in np.nonzero(~exact)[0].tolist():
        width = int(last[row]) + 1
        own = bounds if bounds is not None else upper_bounds[row, :width].tolist()
        out[row] = histogram_quantiles(qs, list(zip(own, counts[row, :width].tolist(), strict=True)))
    return out


def bucket_fractions_at_or_below(threshold: float, bounds: Sequence[float], counts: Floats) -> Floats:
    """`fraction_at_or_below(threshold, zip(bounds, row))` for every row of `counts`."""
    n_rows, n = counts.shape
    if n == 0 or not math.isinf(bounds[-1]) or bounds[-1] < 0 or math.isnan(threshold) \
            or any(math.isnan(b) for b in bounds):
        return np.array([fraction_at_or_below(threshold, list(zip(bounds, row, strict=True)))
                         for row in counts.tolist()], dtype=np.float64).reshape(n_rows)
    # Which bucket holds the threshold depends on the bounds alone (histogram_fraction's walk).
    total = counts[:, -1]
    zero = np.zeros(n_rows)
    rank_at = counts[:, -1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # rows with inf/NaN: redone below
        for index, upper in enumerate(bounds):
            start = bounds[index - 1] if index else (0.0 if bounds[0] > 0 else -math.inf)
            rank = counts[:, index - 1] if index else zero
            if start >= threshold:
                rank_at = rank
                break
            if upper > threshold:
                if start == -math.inf:
                    rank_at = counts[:, index]
                else:
                    rank_at = rank + (counts[:, index] - rank) * (threshold - start) / (upper - start)
                break
        out = (np.minimum(rank_at, total) - np.minimum(0.0, total)) / total
    out = np.where(total == 0, math.nan, out)
    odd = ~np.isfinite(counts).all(axis=1)
    for row in np.nonzero(odd)[0].tolist():
        out[row] = fraction_at_or_below(threshold, list(zip(bounds, counts[row].tolist(), strict=True)))
    return out


def _vector_exact(counts: Floats, repaired: Floats) -> npt.NDArray[np.bool_]:
    """Rows whose repair by a running maximum is Prometheus' (ensureMonotonicAndIgnoreSmallDeltas).

    That needs finite, non-negative counts, and every rise either from 0 to a normal count or
    clearly above the small-delta tolerance (`_clearly_above`): a rise within it is not kept.
    """
    with np.errstate(invalid="ignore"):
        plain = (np.isfinite(counts) & (counts >= 0)).all(axis=1)
        kept, following = repaired[:, :-1], repaired[:, 1:]
        rise = following - kept
        clear = np.where(
            kept == 0,
            following >= _MIN_NORMAL,
            (kept >= _MIN_NORMAL) & (rise >= 2 * SMALL_DELTA_TOLERANCE * (following + kept)),
        )
        exact: npt.NDArray[np.bool_] = plain & ((rise == 0) | clear).all(axis=1)
        return exact
