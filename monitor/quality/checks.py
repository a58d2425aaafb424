"""Pure checks on one day's judgments: refusals, output length against the baseline, scores.

Plain values in, plain values out; the run orchestration feeds them from the store.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from monitor.quality.language import nonlanguage
from monitor.quality.summary import LengthStats, QualitySummary

# The screen catches the stock phrasings; the judge's flag catches the rest.
REFUSAL_PATTERNS = [
    r"\bI'?m sorry,? but I (?:can(?:no|')t|won'?t|am unable)",
    r"\bI (?:can(?:no|')t|won'?t|am unable to|am not able to) (?:help|assist|provide|comply|do that)",
    r"\bI'?m (?:not able|unable) to (?:help|assist|provide|comply)",
    r"\bAs an AI(?: language model)?\b",
    r"抱歉[^。！？\n]{0,30}(?:无法|不能)",
    r"我无法",
    r"我不能(?:提供|帮助|协助|回答)",
    r"作为一个?(?:AI|人工智能)",
]
_REFUSAL = re.compile("|".join(f"(?:{p})" for p in REFUSAL_PATTERNS), re.IGNORECASE)

# Without a token count, the length is estimated: ~4 characters a token for Latin text
# (OpenAI's rule of thumb), ~1 token per CJK character (Qwen/Llama tokenizers: 0.6-1.5).
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")


def refusal_keyword(response: str) -> bool:
    return _REFUSAL.search(response) is not None


def estimate_tokens(text: str) -> int:
    cjk = len(_CJK.findall(text))
    return max(1, cjk + math.ceil((len(text) - cjk) / 4)) if text else 0


def wilson_interval(successes: int, trials: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval (95 % by default) of a binomial proportion; (0, 1) without trials."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def psi(baseline: Sequence[float], current: Sequence[float], bins: int = 10, smoothing: float = 0.5) -> float | None:
    """Population stability index, bins cut at the baseline's deciles (None without data).

    Repeated quantiles (discrete lengths) collapse into fewer bins. Each bin gets `smoothing`
    extra counts (additive smoothing): with ~100 samples a day a bin can be empty by chance, and
    a fixed tiny floor (1e-4) would then add ~0.7 to the index for nothing but sampling noise.
    """
    if len(baseline) == 0 or len(current) == 0:
        return None
    base = np.asarray(baseline, dtype=float)
    cur = np.asarray(current, dtype=float)
    edges = np.unique(np.quantile(base, np.linspace(0, 1, bins + 1)[1:-1]))
    # Bin i holds values in (edges[i-1], edges[i]]: right=True puts a value equal to an edge left of it.
    base_share = _smoothed_shares(np.searchsorted(edges, base, side="left"), len(edges) + 1, smoothing)
    cur_share = _smoothed_shares(np.searchsorted(edges, cur, side="left"), len(edges) + 1, smoothing)
    return float(np.sum((cur_share - base_share) * np.log(cur_share / base_share)))


def _smoothed_shares(bin_index: Any, bins: int, smoothing: float) -> Any:
    counts = np.bincount(bin_index, minlength=bins) + smoothing
    return counts / counts.sum()


def ks_pvalue(baseline: Sequence[float], current: Sequence[float]) -> float | None:
    if len(baseline) == 0 or len(current) == 0:
        return None
    return float(stats.ks_2samp(baseline, current).pvalue)


@dataclass(frozen=True)
class Judged:
    """One judgment as the checks see it."""

    score: int | None
    refusal: bool | None  # the judge's flag
    refusal_keyword: bool
    hallucination: bool | None
    error: str | None
    length_tokens: int
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    reason: str | None = None  # the judge's reason (the rubric asks for one)
    response: str = ""  # the judged response (to tell a varied sample from a repeated one)

    @classmethod
    def of(cls, row: Any) -> Judged:
        """A stored judgment (quality/store.py's QualityJudgment) as the checks see it."""
        return cls(row.score, row.refusal, row.refusal_keyword, row.hallucination, row.error, row.length_tokens,
                   row.cost_usd, row.input_tokens, row.judge_output_tokens, row.reason, row.response)


# A run whose judge failed on more than this share of the sample, or judged (validly) fewer than
# this share, is a failed run: no score. The same numbers as QualityJudgeFailing (alerts/quality.yml).
MAX_JUDGE_ERROR_RATIO = 0.2
MIN_JUDGED_RATIO = 0.5
UNIFORM_MIN_VERDICTS = 3  # one verdict repeated over fewer than this may be chance


def suspect_verdicts(judged: Sequence[Judged]) -> list[bool]:
    """Which verdicts say nothing about the model, per judgment: no reason (the rubric asks for one),
    a reason that is not language (`nonlanguage`), or one identical verdict (score, flags and
    reason) for a whole sample of different responses."""
    answered = [i for i, j in enumerate(judged) if j.error is None and j.score is not None]
    suspect = [j.error is None and j.score is not None
               and (not (j.reason or "").strip() or nonlanguage(j.reason or "")) for j in judged]
    verdicts = {(judged[i].score, judged[i].refusal, judged[i].hallucination, (judged[i].reason or "").strip())
                for i in answered}
    responses = {judged[i].response for i in answered}
    if len(answered) >= UNIFORM_MIN_VERDICTS and len(verdicts) == 1 and len(responses) > 1:
        for i in answered:
            suspect[i] = True
    return suspect


def run_failure(sampled: int, errors: int, judged: int) -> str | None:
    """Why a run failed (None: it did not): too many judge errors, or too little judged."""
    if sampled == 0:
        return None
    if errors / sampled > MAX_JUDGE_ERROR_RATIO:
        return f"the judge failed on {errors} of {sampled} samples"
    if judged / sampled < MIN_JUDGED_RATIO:
        return f"only {judged} of {sampled} samples have a usable verdict"
    return None


def counted_refusals(judged: Sequence[Judged], failed: bool) -> list[bool]:
    """Which responses count as refused, per judgment: the keyword screen always; the judge's flag
    where its verdict counts (not suspect, in a run that did not fail). The ratio and the report's
    list of refused answers both read this, so they cannot disagree."""
    suspect = suspect_verdicts(judged)
    return [j.refusal_keyword or (bool(j.refusal) and not odd and not failed)
            for j, odd in zip(judged, suspect, strict=True)]


def summarise(judged: Sequence[Judged], baseline_lengths: Sequence[int], baseline: dict[str, float | None],
              available: int, sample_size: int, withheld: str | None = None) -> QualitySummary:
    """The run's numbers for one model (the API's per-model object, stored with the run).

    `baseline`: score_mean and refusal_ratio averaged over the baseline days' runs.
    Suspect verdicts (see `suspect_verdicts`) are not scored: neither their score nor their flags
    count. A failed run (`run_failure`) has no score at all; its lengths and keyword refusals,
    which need no judge, still count, and so does the judge's cost. `withheld` (the judge failed
    its known answers: calibration.py) fails the run too and withholds every refusal and
    hallucination figure: no number of the model is left that an uncalibrated judge could move.
    """
    suspect = suspect_verdicts(judged)
    usable = [j for j, odd in zip(judged, suspect, strict=True) if not odd]
    errors = sum(1 for j in judged if j.error is not None)
    valid = [j for j in usable if j.error is None and j.score is not None]
    judge_failed = run_failure(len(judged), errors, len(valid))
    withheld = None if judge_failed else withheld  # a judge that failed outright failed its known answers too
    failed = judge_failed or withheld
    scored = [] if failed else valid
    lengths = [j.length_tokens for j in judged]
    refusals = sum(counted_refusals(judged, failed is not None))
    hallucinations = sum(1 for j in scored if j.hallucination)
    score_mean = sum(j.score for j in scored if j.score is not None) / len(scored) if scored else None
    refusal_ratio = refusals / len(judged) if judged and not withheld else None
    low, high = wilson_interval(refusals, len(judged))
    base_mean_len = float(np.mean(baseline_lengths)) if len(baseline_lengths) else None
    mean_len = float(np.mean(lengths)) if lengths else None
    summary = QualitySummary(
        samples=len(scored),
        sampled=len(judged),
        available=available,
        sample_size=sample_size,
        short_of_sample_size=max(0, sample_size - available),
        score_mean=score_mean,
        score_histogram={str(s): sum(1 for j in scored if j.score == s) for s in range(1, 6)},
        refusals=refusals,
        refusal_ratio=refusal_ratio,
        refusal_ratio_ci95=(low, high) if judged else None,
        refusals_by_keyword=sum(1 for j in judged if j.refusal_keyword),
        refusals_by_judge=sum(1 for j, odd in zip(judged, suspect, strict=True) if j.refusal and not odd),
        hallucination_ratio=hallucinations / len(scored) if scored else None,
        output_tokens=_length_stats(lengths),
        baseline_output_tokens=_length_stats(list(baseline_lengths)),
        output_length_mean_change_ratio=(
            (mean_len - base_mean_len) / base_mean_len if mean_len is not None and base_mean_len else None
        ),
        psi=psi(baseline_lengths, lengths),
        ks_pvalue=ks_pvalue(baseline_lengths, lengths),
        baseline_score_mean=baseline.get("score_mean"),
        score_baseline_delta=(
            score_mean - b if score_mean is not None and (b := baseline.get("score_mean")) is not None else None
        ),
        baseline_refusal_ratio=baseline.get("refusal_ratio"),
        # JSON has no infinity: a first refusal after a baseline of none is null here, +Inf in /metrics.
        refusal_baseline_ratio=_finite(refusal_baseline_ratio(refusal_ratio, baseline.get("refusal_ratio"))),
        judge_errors=errors,
        judge_error_ratio=errors / len(judged) if judged else None,
        judged_ratio=len(valid) / len(judged) if judged else None,
        suspect_verdicts=sum(suspect),
        failed=failed,
        judge_input_tokens=sum(j.input_tokens for j in judged),
        judge_output_tokens=sum(j.output_tokens for j in judged),
        judge_cost_usd=sum(j.cost_usd for j in judged),
        nonlanguage_reasons=sum(1 for j in judged if j.error is None and j.score is not None
                                and nonlanguage(j.reason or "")),
    )
    if withheld:
        summary = replace(summary, refusals=None, refusal_ratio_ci95=None, refusals_by_keyword=None,
                          refusals_by_judge=None, refusal_baseline_ratio=None, uncalibrated=withheld)
    return summary


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def refusal_baseline_ratio(value: float | None, base: float | None) -> float | None:
    """value / base; +inf when the baseline had none and today has some (a doubling of zero)."""
    if value is None or base is None:
        return None
    if base == 0:
        return math.inf if value > 0 else 1.0
    return value / base


def _length_stats(lengths: list[int]) -> LengthStats | None:
    if not lengths:
        return None
    values = np.asarray(lengths, dtype=float)
    return LengthStats(len(lengths), float(values.sum()), float(values.mean()), float(np.quantile(values, 0.5)),
                       float(np.quantile(values, 0.95)))
