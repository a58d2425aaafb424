"""rate() and histogram_quantile() against Prometheus' own test vectors (promql/testdata)."""

import math
import random
import sys
from math import nextafter

import numpy as np
import pytest

from monitor.service.promql import (
    _MIN_NORMAL,
    _almost_equal,
    _monotonic,
    _vector_exact,
    bucket_fractions_at_or_below,
    bucket_quantiles,
    fraction_at_or_below,
    histogram_fraction,
    histogram_quantile,
    histogram_quantiles,
    ragged_bucket_quantiles,
    reset_corrected_delta,
)
from tests.support.promql_oracle import extrapolated_increase, extrapolated_rate

BUCKETS = [(0.1, 50.0), (0.2, 70.0), (1.0, 110.0), (math.inf, 120.0)]


@pytest.mark.parametrize(("q", "expected"), [(0.2, 0.048), (0.5, 0.15), (0.8, 0.72)])
def test_quantile_prometheus_vectors(q: float, expected: float) -> None:
    assert histogram_quantile(q, BUCKETS) == pytest.approx(expected, abs=1e-12)


def test_quantile_edges() -> None:
    assert histogram_quantile(0.99, BUCKETS) == 1.0  # rank in +Inf bucket -> highest finite bound
    assert histogram_quantile(1.0, BUCKETS) == 1.0
    assert histogram_quantile(0.0, BUCKETS) == 0.0
    assert histogram_quantile(-1, BUCKETS) == -math.inf
    assert histogram_quantile(2, BUCKETS) == math.inf
    assert math.isnan(histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]))  # no observations
    assert math.isnan(histogram_quantile(0.5, [(0.1, 3.0), (1.0, 4.0)]))  # no +Inf bucket
    assert math.isnan(histogram_quantile(0.5, [(math.inf, 4.0)]))  # a single bucket


def test_quantile_order_independent_and_monotonic_fix() -> None:
    shuffled = [BUCKETS[2], BUCKETS[0], BUCKETS[3], BUCKETS[1]]
    assert histogram_quantile(0.5, shuffled) == pytest.approx(0.15)
    # A float dip (70 -> 69.9999) is raised to the running max, as Prometheus does.
    dipped = [(0.1, 50.0), (0.2, 70.0), (0.5, 69.9999), (1.0, 110.0), (math.inf, 120.0)]
    assert histogram_quantile(0.5, dipped) == pytest.approx(0.15)


def test_counter_reset_vector() -> None:
    # Prometheus' vector: samples 0 1 2 3 2 3 4, an engine restart after the 3 -> increase 7.
    values = [0.0, 1, 2, 3, 2, 3, 4]
    assert reset_corrected_delta(values) == 7
    points = [(float(t), v) for t, v in enumerate(values)]
    assert extrapolated_increase(points, 0.0, 6.0) == pytest.approx(7.0)
    assert extrapolated_rate(points, 0.0, 6.0) == pytest.approx(7 / 6)


def test_rate_extrapolation_rules() -> None:
    # Samples every 10 s from t=5 to t=55 in a [0, 60] range, +10 per sample.
    points = [(5.0 + 10 * i, 100.0 + 10 * i) for i in range(6)]
    # Gaps of 5 s at both ends are below 1.1 x the 10 s step: extrapolate the full 5 s each way.
    assert extrapolated_increase(points, 0.0, 60.0) == pytest.approx(50 * 60 / 50)
    # Starting well inside the range: extrapolate only half a step (5 s) at the start.
    late = [(30.0 + 10 * i, 100.0 + 10 * i) for i in range(3)]
    assert extrapolated_increase(late, 0.0, 60.0) == pytest.approx(20 * (20 + 5 + 10) / 20)
    # A counter that started at 0 recently is not extrapolated below zero.
    fresh = [(20.0, 1.0), (30.0, 11.0), (40.0, 21.0)]
    assert extrapolated_increase(fresh, 0.0, 40.0) == pytest.approx(20 * (20 + 1) / 20)
    assert extrapolated_rate([(1.0, 5.0)], 0.0, 60.0) is None  # one sample: no rate


def test_fraction_is_inverse_of_quantile() -> None:
    for q in (0.2, 0.5, 0.8):
        assert fraction_at_or_below(histogram_quantile(q, BUCKETS), BUCKETS) == pytest.approx(q)
    assert fraction_at_or_below(5.0, BUCKETS) == pytest.approx(110 / 120)  # beyond the last bound
    assert math.isnan(fraction_at_or_below(0.1, [(0.1, 0.0), (math.inf, 0.0)]))


# --- Prometheus 3.x edge cases (promql/promqltest/testdata/histograms.test) ---------------------

INF = math.inf


def test_same_bound_written_differently_is_one_bucket() -> None:
    # mixed_bucket: le="0.2", "2e-1" and "2.0e-1" are one bound; their counts add up (coalesceBuckets).
    mixed = [(0.1, 1.0), (float("0.2"), 1.0), (float("2e-1"), 1.0), (float("2.0e-1"), 1.0), (INF, 4.0)]
    assert histogram_quantile(0.5, mixed) == pytest.approx(0.15)  # 0.2 when they overwrite each other
    assert histogram_quantile(0.75, mixed) == pytest.approx(0.2)
    assert math.isnan(histogram_quantile(0.5, [(float("+inf"), 0.0), (INF, 0.0)]))


def test_nonmonotonic_vector() -> None:
    # nonmonotonic_bucket at 50m: counts 20, 10, 50, 40, 90, 80 for le 0.1 .. +Inf.
    buckets = [(0.1, 20.0), (1.0, 10.0), (10.0, 50.0), (100.0, 40.0), (1000.0, 90.0), (INF, 80.0)]
    assert histogram_quantile(0.01, buckets) == pytest.approx(0.0045)
    assert histogram_quantile(0.5, buckets) == pytest.approx(8.5)
    assert histogram_quantile(0.99, buckets) == pytest.approx(979.75)


def test_small_deltas_are_equal_counts() -> None:
    # A bucket 1e-13 (relative) above the previous one holds no observations (Prometheus >= 2.49);
    # without the tolerance the 0.5 quantile would be interpolated inside (0.2, 0.5].
    base = 70.0
    buckets = [(0.1, 50.0), (0.2, base), (0.5, base * (1 + 1e-13)), (INF, base * (1 + 1e-13))]
    assert histogram_quantile(1.0, buckets) == 0.2
    # A real difference (1e-9) is kept.
    real = [(0.1, 50.0), (0.2, base), (0.5, base * (1 + 1e-9)), (INF, base * (1 + 1e-9))]
    assert histogram_quantile(1.0, real) == 0.5


def test_the_monotonic_repair_keeps_prometheus_rule_around_the_tolerance() -> None:
    # _monotonic skips the full almost-equal test for counts clearly above the last one: it must
    # agree with the rule as written (ensureMonotonicAndIgnoreSmallDeltas) at, below and above the
    # tolerance, for zeros, subnormals, huge and non-finite counts.
    def reference(kept: float, count: float) -> float:
        return kept if count != kept and (_almost_equal(kept, count) or count < kept) else count

    kepts = [0.0, 5e-324, 1e-310, _MIN_NORMAL, 1.0, 70.0, 1e300, sys.float_info.max, INF, math.nan]
    steps = [0.0, 1e-14, 5e-13, 1e-12, 2e-12, 4e-12, 1e-9, 1.0]
    for kept in kepts:
        counts = [kept * (1 + step) for step in steps] + [kept + step for step in steps]
        counts += [0.0, 5e-324, 1e-300, INF, -1.0, math.nan, nextafter(kept, INF), nextafter(kept, -INF)]
        for count in counts:
            [_, (_, repaired)] = _monotonic([(0.1, kept), (INF, count)])
            expected = reference(kept, count)
            assert repaired == expected or (math.isnan(repaired) and math.isnan(expected)), (kept, count)


@pytest.mark.parametrize(
    ("lower", "upper", "buckets", "expected"),
    [
        (0, 4, [(0, 0), (2, 1), (4, 2), (6, 3), (INF, 3)], 2 / 3),
        (0, 3.5, [(0, 0), (2, 1), (4, 2), (6, 3), (INF, 3)], 0.5833333333333334),
        (0, 1.5, [(1, 1), (2, 3), (3, 6), (INF, 100)], 0.02),
        (-4, -2, [(-3, 10), (-2, 12), (-1, 15), (INF, 100)], 0.02),
        (-INF, -1.5, [(-3, 10), (-2, 12), (-1, 15), (INF, 100)], 0.135),
        (-INF, INF, [(1, 1), (2, 3), (3, 6), (INF, 100)], 1.0),
        (4, 5, [(1, 1), (2, 3), (3, 6), (INF, 100)], 0.0),
        (2, 5, [(1, 1), (2, 3), (3, 6), (INF, 100)], 0.03),
        (2, 2, [(1, 1), (2, 3), (3, 6), (INF, 100)], 0.0),
    ],
)
def test_histogram_fraction_vectors(lower: float, upper: float, buckets: list[tuple[float, float]],
                                    expected: float) -> None:
    assert histogram_fraction(lower, upper, buckets) == pytest.approx(expected, abs=1e-12)


def test_fraction_rules_of_prometheus_3_8() -> None:
    assert fraction_at_or_below(INF, BUCKETS) == 1.0  # +Inf bound: everything
    assert math.isnan(fraction_at_or_below(math.nan, BUCKETS))  # NaN is not 100 % attainment
    assert fraction_at_or_below(0.2, [(INF, 7.0)]) == 0.0  # only +Inf: nothing known below 0.2
    assert math.isnan(fraction_at_or_below(0.2, [(0.1, 5.0), (1.0, 7.0)]))  # no +Inf bucket


def _hostile_rows(rng: random.Random, width: int) -> list[list[float]]:
    """Bucket rates as derivations meet them, and as summed fleets and broken pages make them."""
    rows = []
    for _ in range(400):
        counts = sorted(rng.choice((0.0, rng.uniform(0, 50), float(rng.randint(0, 9)))) for _ in range(width))
        kind = rng.randrange(9)
        spot = rng.randrange(1, width) if width > 1 else 0
        if kind == 1:  # a rise within the small-delta tolerance (float noise of a fleet sum)
            counts[spot] = counts[spot - 1] * (1 + rng.choice((0.5e-12, 1.5e-12, 3e-12))) + rng.choice((0, 1e-300))
            counts[spot:] = [max(c, counts[spot]) for c in counts[spot:]]
        elif kind == 2:  # a dip (float sums of rates)
            counts[spot] = counts[spot - 1] - rng.uniform(0, 1)
        elif kind == 3:
            counts[spot] = rng.choice((math.nan, math.inf, -math.inf))
        elif kind == 4:
            counts = [0.0] * width  # no observations
        elif kind == 5:
            counts[spot] = -rng.uniform(0, 3)
        elif kind == 6:
            counts[spot] = counts[spot - 1] + 5e-324  # subnormal steps
        elif kind == 7:
            counts = [c * 1e-310 for c in counts]  # all subnormal
        rows.append(counts)
    return rows


@pytest.mark.parametrize("bounds", [
    (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, math.inf),
    (-1.0, -0.5, 0.0, 0.5, math.inf),  # bounds at and below zero
    (0.0, math.inf),
    (1.0, math.inf),
    (math.inf,),  # a single bucket
    (0.1, 0.2, 1.0),  # no +Inf bucket
    (0.1, 0.2, math.inf, math.nan),  # a bucket whose le reads NaN
    (-math.inf, 0.5, math.inf),
])
def test_many_histograms_at_once_equal_one_by_one(bounds: tuple[float, ...]) -> None:
    """The derivation's numpy path (all of a window's histograms per set of bounds) gives bit for
    bit what histogram_quantiles and fraction_at_or_below give each histogram on its own."""
    rng = random.Random(22)
    rows = _hostile_rows(rng, len(bounds))
    counts = np.array(rows, dtype=np.float64)
    qs = (0.5, 0.95, 0.99, 0.0, 1.0, -0.5, 1.5, math.nan)
    many = bucket_quantiles(qs, bounds, counts)
    fractions = {t: bucket_fractions_at_or_below(t, bounds, counts) for t in (0.2, 0.05, 0.0, -1.0, 1e9, math.inf)}
    for at, row in enumerate(rows):
        one = histogram_quantiles(qs, list(zip(bounds, row, strict=True)))
        assert many[at].tolist() == pytest.approx(one, nan_ok=True, rel=0, abs=0), (row, many[at], one)
        for threshold, found in fractions.items():
            alone = fraction_at_or_below(threshold, sorted(zip(bounds, row, strict=True)))
            assert found[at] == pytest.approx(alone, nan_ok=True, rel=0, abs=0), (threshold, row)


def test_groups_of_other_bounds_at_once_equal_each_group_alone() -> None:
    """`ragged_bucket_quantiles` pads each row to the widest group with its +Inf bucket: every row
    gives bit for bit what its group alone gives, hostile rows, groups of one bucket or without
    +Inf, and a NaN bound (all walked on their own) among them."""
    rng = random.Random(7)
    shapes = [
        (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, math.inf),
        (0.5, 1.0, math.inf),
        (-1.0, -0.5, 0.0, 0.5, math.inf),
        (0.0, math.inf),
        (math.inf,),
        (0.1, 0.2, 1.0),
        (0.1, 0.2, math.inf, math.nan),
        (-math.inf, 0.5, math.inf),
        (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, math.inf),
    ]
    groups = [(bounds, np.array(_hostile_rows(rng, len(bounds)), dtype=np.float64)) for bounds in shapes]
    qs = (0.5, 0.95, 0.99, 0.0, 1.0, -0.5, 1.5, math.nan)
    together = ragged_bucket_quantiles(qs, groups)
    assert len(together) == len(groups)
    for (bounds, counts), found in zip(groups, together, strict=True):
        alone = bucket_quantiles(qs, bounds, counts)
        assert found.shape == alone.shape
        np.testing.assert_array_equal(found, alone, err_msg=str(bounds))  # NaN equals NaN here
        for row, values in zip(counts.tolist(), found.tolist(), strict=True):
            one = histogram_quantiles(qs, list(zip(bounds, row, strict=True)))
            assert values == pytest.approx(one, nan_ok=True, rel=0, abs=0), (bounds, row)


def test_the_vector_path_takes_the_usual_rows_and_leaves_tolerance_rows_to_the_walk() -> None:
    counts = np.array([[0.0, 2.0, 5.0, 5.0, 9.0],  # the usual: rises, a flat bucket
                       [1.0, 1.0 + 1e-13, 4.0, 4.0, 4.0],  # a rise inside the tolerance
                       [0.0, 3.0, 2.0, 5.0, 5.0]])  # a dip: a running maximum repairs it as Prometheus does
    exact = _vector_exact(counts, np.maximum.accumulate(counts, axis=1))
    assert exact.tolist() == [True, False, True]
