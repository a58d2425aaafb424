"""rate() and histogram_quantile() against Prometheus' own test vectors (promql/testdata)."""

import math

import pytest

from monitor.service.promql import (
    extrapolated_increase,
    extrapolated_rate,
    fraction_at_or_below,
    histogram_quantile,
    reset_corrected_delta,
)

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
