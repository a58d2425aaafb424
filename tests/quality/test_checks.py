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
    judged = [Judged(5, False, False, False, None, 100, reason="exact", response="a"),
              Judged(3, True, False, True, None, 120, reason="declined", response="b"),
              Judged(None, None, True, None, "timed out", 80, response="c"),
              Judged(4, False, False, False, None, 100, reason="thin", response="d"),
              Judged(4, False, False, False, None, 100, reason="fine", response="e")]
    summary = summarise(judged, [100, 100, 100, 100], {"score_mean": 4.5, "refusal_ratio": 0.25},
                        available=5, sample_size=100)
    assert summary.samples == 4 and summary.sampled == 5 and summary.judge_errors == 1
    assert summary.failed is None and summary.judge_error_ratio == pytest.approx(0.2)  # 20 %: not over it
    assert summary.judged_ratio == pytest.approx(0.8) and summary.suspect_verdicts == 0
    assert summary.score_mean == pytest.approx(4.0)
    assert summary.score_baseline_delta == pytest.approx(-0.5)
    assert summary.score_histogram == {"1": 0, "2": 0, "3": 1, "4": 2, "5": 1}
    assert summary.refusal_ratio == pytest.approx(0.4)  # judge flag + keyword screen, over all sampled
    assert summary.refusal_baseline_ratio == pytest.approx(1.6)
    assert summary.hallucination_ratio == pytest.approx(1 / 4)
    assert summary.output_length_mean_change_ratio == pytest.approx(0.0)
    assert summary.output_tokens.p50 == pytest.approx(100.0)
    assert summary.short_of_sample_size == 95


def verdicts(scores: list[int | None], reasons: list[str] | None = None, errors: int = 0) -> list[Judged]:
    """Judgments of different responses; `errors` more that failed."""
    reasons = reasons or [f"reason {i}" for i in range(len(scores))]
    judged = [Judged(score, False, False, False, None, 100 + i, reason=reason, response=f"response {i}")
              for i, (score, reason) in enumerate(zip(scores, reasons, strict=True))]
    return judged + [Judged(None, None, False, None, "HTTP 400: samplers", 90, cost_usd=0.01, response=f"e{i}")
                     for i in range(errors)]


def test_a_run_the_judge_failed_on_has_no_score_but_its_cost() -> None:
    summary = summarise(verdicts([], errors=9), [100] * 4, {"score_mean": 4.2}, available=9, sample_size=9)
    assert summary.failed == "the judge failed on 9 of 9 samples"
    assert summary.score_mean is None and summary.score_baseline_delta is None
    assert summary.judge_error_ratio == 1.0 and summary.judged_ratio == 0.0
    assert summary.judge_cost_usd == pytest.approx(0.09)  # paid for all the same
    assert summary.output_tokens.count == 9  # lengths need no judge


def test_more_than_a_fifth_of_errors_fails_the_run() -> None:
    summary = summarise(verdicts([4, 5, 4, 3, 4, 5, 4], errors=3), [], {}, available=10, sample_size=10)
    assert summary.failed == "the judge failed on 3 of 10 samples" and summary.score_mean is None
    assert summarise(verdicts([4, 5, 4, 3, 4, 5, 4, 4], errors=2), [], {}, 10, 10).failed is None


def test_verdicts_without_a_reason_are_suspect_and_not_scored() -> None:
    """Six verdicts of 1 with empty reasons: junk a tiny judge produced, not a drop in quality."""
    summary = summarise(verdicts([1] * 6, reasons=[""] * 6), [], {"score_mean": 4.3}, 6, 6)
    assert summary.suspect_verdicts == 6 and summary.samples == 0
    assert summary.failed == "only 0 of 6 samples have a usable verdict" and summary.score_mean is None
    one_blank = summarise(verdicts([4, 5, 3, 4, 1], reasons=["a", "b", "c", "d", " "]), [], {}, 5, 5)
    assert one_blank.suspect_verdicts == 1 and one_blank.failed is None
    assert one_blank.score_mean == pytest.approx(4.0)  # the blank one is left out


def test_one_identical_verdict_for_a_varied_sample_is_suspect() -> None:
    same = summarise(verdicts([3] * 5, reasons=["Adequate."] * 5), [], {}, 5, 5)
    assert same.suspect_verdicts == 5 and same.failed is not None and same.score_mean is None
    # the same score with reasons of its own is a verdict; so is one repeated over a repeated response
    assert summarise(verdicts([3] * 5), [], {}, 5, 5).suspect_verdicts == 0
    repeated = [Judged(3, False, False, False, None, 100, reason="Adequate.", response="same") for _ in range(5)]
    assert summarise(repeated, [], {}, 5, 5).suspect_verdicts == 0


def test_a_suspect_verdict_flags_no_refusal() -> None:
    junk = [Judged(1, True, False, True, None, 100, reason="", response=f"r{i}") for i in range(4)]
    summary = summarise(junk, [], {}, 4, 4)
    assert summary.refusals == 0 and summary.hallucination_ratio is None
