"""Quality view -> metric families (per model, from each model's newest finished run).

Values a rule file compares against a baseline are exported as their own gauges (the alert
subset has no arithmetic between series): score minus baseline, refusal ratio over baseline,
relative change of the mean length, and the age of the last run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.core import Metric

from monitor.catalog import family
from monitor.quality.checks import refusal_baseline_ratio
from monitor.quality.layer import QualityView
from monitor.quality.summary import GAUGES, LengthStats, QualitySummary


def render_quality(view: QualityView, now: float) -> Iterator[Metric]:
    if not view.latest:
        return  # no run stored yet: no series at all (not zeros)
    families = {name: family(name) for name in GAUGES.values()}
    refusal_ratio = family("inference_quality_refusal_baseline_ratio")
    tokens = family("inference_quality_output_tokens")
    last_run = family("inference_quality_last_run_timestamp_seconds")
    age = family("inference_quality_last_run_age_seconds")
    failed = family("inference_quality_run_failed")
    judge_flags = {name: family(name) for name in _JUDGE_FLAGS.values()}
    agreement = {name: family(name) for name in AGREEMENT.values()}
    for model, result in sorted(view.latest.items()):
        labels = {"model": model}
        summary = result.summary
        for attribute, name in GAUGES.items():
            value = getattr(summary, attribute)
            if value is not None:
                families[name].add_sample(name, labels, float(value))
        ratio = refusal_baseline_ratio(summary.refusal_ratio, summary.baseline_refusal_ratio)
        if ratio is not None:
            refusal_ratio.add_sample(refusal_ratio.name, labels, ratio)
        if summary.has("failed"):  # runs stored before the judge-failure check do not say
            failed.add_sample(failed.name, labels, 1.0 if summary.failed else 0.0)
        _add_judge(summary, labels, judge_flags, agreement)
        _add_length_summary(tokens, labels, summary.output_tokens)
        last_run.add_sample(last_run.name, labels, result.finished)
        age.add_sample(age.name, labels, max(0.0, now - result.finished))
    yield from families.values()
    yield refusal_ratio
    yield tokens
    yield last_run
    yield age
    yield failed
    yield from judge_flags.values()
    yield from agreement.values()
    cost = family("inference_quality_judge_cost_usd_total")
    cost.add_sample("inference_quality_judge_cost_usd_total", {}, view.judge_cost_usd_total)
    yield cost


# Summary field -> gauge, labelled with the model and the judge that gave the verdicts.
AGREEMENT = {
    "calibration_kappa": "inference_quality_judge_agreement_kappa",
    "calibration_exact_ratio": "inference_quality_judge_agreement_exact_ratio",
    "calibration_within_one_ratio": "inference_quality_judge_agreement_within_one_ratio",
    "calibration_refusal_agreement": "inference_quality_judge_agreement_refusal_ratio",
    "calibration_hallucination_agreement": "inference_quality_judge_agreement_hallucination_ratio",
    "calibration_bias": "inference_quality_judge_calibration_bias",
    "calibration_answered": "inference_quality_judge_calibration_answers",
}
# Text fields of the summary exported as 1 (set) / 0 (None), where the run measured them.
_JUDGE_FLAGS = {"uncalibrated": "inference_quality_judge_uncalibrated",
                "judge_changed": "inference_quality_judge_changed"}


def _add_judge(summary: QualitySummary, labels: dict[str, str], flags: dict[str, Metric],
               agreement: dict[str, Metric]) -> None:
    """The judge's calibration of the run (runs without known answers, or stored before, have none)."""
    if not summary.calibration_items:
        return
    for attribute, name in _JUDGE_FLAGS.items():
        flags[name].add_sample(name, labels, 1.0 if getattr(summary, attribute) else 0.0)
    judged_by = {**labels, "judge": summary.judge_model or ""}
    for attribute, name in AGREEMENT.items():
        value = getattr(summary, attribute)
        if value is not None:
            agreement[name].add_sample(name, judged_by, float(value))


def _add_length_summary(fam: Metric, labels: dict[str, str], stats: LengthStats | None) -> None:
    if not stats:
        return
    for quantile, value in (("0.5", stats.p50), ("0.95", stats.p95)):
        if math.isfinite(value):
            fam.add_sample(fam.name, {**labels, "quantile": quantile}, value)
    fam.add_sample(f"{fam.name}_count", labels, float(stats.count))
    fam.add_sample(f"{fam.name}_sum", labels, stats.sum)
