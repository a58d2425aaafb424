"""The charts' ring: bounded, time-ordered, gaps for missing values; the SVG sparkline."""

from __future__ import annotations

from monitor.web.charts import HEIGHT, PAD, WIDTH, sparkline
from monitor.web.history import HOUR, History


def test_the_ring_keeps_at_most_max_points_per_series() -> None:
    history = History(max_points=100)
    for second in range(1000):
        history.add(float(second), {"requests_per_second": float(second), "usd_per_hour": 1.0})
    ring = history.rings["requests_per_second"]
    assert len(ring) == 100 and ring[0] == (900.0, 900.0) and ring[-1] == (999.0, 999.0)
    assert set(history.rings) == {"requests_per_second", "usd_per_hour"}


def test_missing_values_leave_gaps_and_repeated_ticks_are_kept_once() -> None:
    history = History()
    history.add(10.0, {"ttft_p99_seconds": 0.5, "gpu_utilization_ratio": None})
    history.add(10.0, {"ttft_p99_seconds": 0.7})
    history.add(20.0, {"gpu_utilization_ratio": 0.3})
    assert list(history.rings["ttft_p99_seconds"]) == [(10.0, 0.5)]
    assert list(history.rings["gpu_utilization_ratio"]) == [(20.0, 0.3)]


def test_points_are_the_last_hour_only() -> None:
    history = History()
    for ts in (0.0, 100.0, HOUR + 50.0):
        history.add(ts, {"usd_per_hour": ts})
    assert history.points("usd_per_hour", HOUR + 60.0) == [(100.0, 100.0), (HOUR + 50.0, HOUR + 50.0)]
    assert history.points("requests_per_second", 0.0) == []


def test_sparkline_spans_the_width_from_zero_up() -> None:
    line = sparkline([(100.0, 2.0), (150.0, 4.0), (200.0, 0.0)], start=0.0, end=200.0)
    coords = [tuple(map(float, p.split(","))) for p in line.polyline.split()]
    # the time axis is the whole [start, end]: the first point, at 100 of 200, sits half-way
    assert coords[0] == (PAD + 0.5 * (WIDTH - 2 * PAD), HEIGHT - PAD - 2.0 / 4.0 * (HEIGHT - 2 * PAD))
    assert coords[1][1] == PAD and coords[2] == (WIDTH - PAD, HEIGHT - PAD)  # 4 at the top, 0 at the bottom
    assert (line.low, line.high, line.last, line.since, line.floor) == (0.0, 4.0, 0.0, 100.0, 0.0)


def test_one_point_is_a_value_without_a_line() -> None:
    line = sparkline([(5.0, 1.5)], 0.0, 10.0)
    assert line.polyline == "" and line.last == 1.5
    assert sparkline([], 0.0, 10.0).last is None
