"""Percentiles from samples are exact (numpy's linear method), goodput counts both objectives,
repeats become mean ± spread."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.loadtest.stats import Goodput, Sample, distribution, over_repeats, percentile, spread, window_figures


@pytest.mark.parametrize("values", [[0.3], [5.0, 1.0], list(np.random.default_rng(7).exponential(0.2, 999))])
def test_percentiles_are_numpys_linear_interpolation(values: list[float]) -> None:
    for p in (50, 95, 99):
        assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), rel=1e-12)


def test_no_value_is_no_percentile_not_zero() -> None:
    assert distribution([]) == {"mean": None, "p50": None, "p95": None, "p99": None}


def _sample(ttft: float | None, tpot: float | None, ok: bool = True, tokens: int = 10) -> Sample:
    return Sample(0.0, ok, "ok" if ok else "http_5xx", ttft, tpot, 1.0 if ok else None, tokens if ok else None,
                  20 if ok else None)


def test_goodput_needs_both_objectives_and_a_success() -> None:
    samples = [_sample(0.1, 0.01), _sample(0.3, 0.01), _sample(0.1, 0.06), _sample(0.1, None),
               _sample(None, None, ok=False)]
    figures = window_figures(samples, 2.0, Goodput(0.2, 0.05))
    assert figures["goodput_ratio"] == pytest.approx(2 / 5)
    assert figures["goodput_requests_per_s"] == pytest.approx(1.0)
    assert figures["requests"] == 5 and figures["failed"] == 1
    assert figures["output_tokens_per_s"] == pytest.approx(40 / 2.0)
    assert figures["total_tokens_per_s"] == pytest.approx((40 + 80) / 2.0)
    assert figures["ttft_s"]["p50"] == pytest.approx(0.1)  # failures are not in the latencies


def test_repeats_become_mean_and_sample_stdev_leaf_by_leaf() -> None:
    repeats = [{"rps": 10.0, "ttft_s": {"p99": 0.2}, "gpu": {}}, {"rps": 12.0, "ttft_s": {"p99": 0.4}, "gpu": {}}]
    out = over_repeats(repeats)
    assert out["rps"] == {"mean": 11.0, "stdev": pytest.approx(2**0.5), "min": 10.0, "max": 12.0, "n": 2}
    assert out["ttft_s"]["p99"]["mean"] == pytest.approx(0.3)
    assert spread([None, None])["mean"] is None
    assert spread([3.0])["stdev"] == 0.0
