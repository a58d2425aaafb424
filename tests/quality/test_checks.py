"""Checks on known distributions and known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from monitor.quality.checks import (
    Judged,
    estimate_tokens,
    ks_pvalue,
    psi,
    refusal_keyword,
    summarise,
    wilson_interval,
)


def lengths(mean: float, n: int = 2000, seed: int = 1) -> list[int]:
    return [int(v) for v in np.random.default_rng(seed).normal(mean, 40, n).clip(1)]


def test_identical_distributions_have_psi_zero_and_high_ks_pvalue() -> None:
    base = lengths(200)
    assert psi(base, base) == pytest.approx(0.0, abs=1e-12)
    assert ks_pvalue(base, base) == pytest.approx(1.0)


def test_same_distribution_new_draw_is_stable() -> None:
    value = psi(lengths(200, seed=1), lengths(200, seed=2))
    assert value is not None and value < 0.1


def test_shifted_lengths_drift() -> None:
    base, shifted = lengths(200), lengths(260, seed=3)
    value = psi(base, shifted)
    assert value is not None and value > 0.25
    pvalue = ks_pvalue(base, shifted)
    assert pvalue is not None and pvalue < 0.05
    assert pvalue == pytest.approx(stats.ks_2samp(base, shifted).pvalue)


def test_psi_by_hand_on_a_small_case() -> None:
    # Baseline 1..10: decile edges at 1.9, 2.8, ... -> 10 bins of one value each; today all in the top bin.
    # Smoothed by 0.5 a bin: baseline 1.5/15 each; today 0.5/15 in nine bins and 10.5/15 in the top one.
    value = psi(list(range(1, 11)), [10] * 10)
    base, empty, full = 1.5 / 15, 0.5 / 15, 10.5 / 15
    expected = 9 * (empty - base) * math.log(empty / base) + (full - base) * math.log(full / base)
    assert value == pytest.approx(expected)


def test_small_samples_of_one_distribution_do_not_drift() -> None:
    # A week of 100 a day against today's 100 of the same distribution: PSI is sampling noise only
    # (about (bins - 1) / n); with a fixed 1e-4 floor for empty bins, half of these would alert.
    rng = np.random.default_rng(5)
    values = [psi(list(rng.integers(32, 200, 700)), list(rng.integers(32, 200, 100))) for _ in range(50)]
    assert all(v is not None for v in values)
    assert float(np.median(values)) < 0.15 and sum(v > 0.25 for v in values if v is not None) <= 2


def test_no_data_no_number() -> None:
    assert psi([], [1, 2]) is None and ks_pvalue([1], []) is None


def test_wilson_interval_reference_values() -> None:
    # Wilson (1927) / Newcombe (1998) table: 0/10 -> (0, 0.2775); 5/10 -> (0.2366, 0.7634)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("text", [
    "I'm sorry, but I can't help with that.",
    "I can't help with this request.",
    "As an AI language model, I do not have opinions.",
    "抱歉，我无法提供这方面的信息。",
    "我无法回答这个问题。",
    "作为一个AI，我没有个人观点。",
    "作为一个人工智能助手，我不能提供医疗建议。",
])
def test_refusal_screen_catches_stock_phrases(text: str) -> None:
    assert refusal_keyword(text)


@pytest.mark.parametrize("text", [
    "Paris is the capital of France.",
    "I'm sorry to hear that your build failed; here is the fix: pin the version.",
    "北京是中国的首都。",
    "The AI act was passed in 2024.",
])
def test_refusal_screen_lets_answers_through(text: str) -> None:
    assert not refusal_keyword(text)


def test_token_estimate() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd" * 25) == 25
    assert estimate_tokens("北京是中国的首都") == 8


def test_summary_numbers() -> None:
    judged = [Judged(5, False, False, False, None, 100), Judged(3, True, False, True, None, 120),
              Judged(None, None, True, None, "timed out", 80), Judged(4, False, False, False, None, 100)]
    summary = summarise(judged, [100, 100, 100, 100], {"score_mean": 4.5, "refusal_ratio": 0.25},
                        available=4, sample_size=100)
    assert summary["samples"] == 3 and summary["sampled"] == 4 and summary["judge_errors"] == 1
    assert summary["score_mean"] == pytest.approx(4.0)
    assert summary["score_baseline_delta"] == pytest.approx(-0.5)
    assert summary["score_histogram"] == {"1": 0, "2": 0, "3": 1, "4": 1, "5": 1}
    assert summary["refusal_ratio"] == pytest.approx(0.5)  # judge flag + keyword screen, over all sampled
    assert summary["refusal_baseline_ratio"] == pytest.approx(2.0)
    assert summary["hallucination_ratio"] == pytest.approx(1 / 3)
    assert summary["output_length_mean_change_ratio"] == pytest.approx(0.0)
    assert summary["output_tokens"]["p50"] == pytest.approx(100.0)
    assert summary["short_of_sample_size"] == 96
