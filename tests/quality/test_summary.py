"""A run's summary goes into the store and out of the API as the same JSON object, old runs included."""

from __future__ import annotations

import json
from dataclasses import replace

from monitor.quality.checks import Judged, summarise
from monitor.quality.layer import ModelResult, QualityView
from monitor.quality.summary import LengthStats, QualitySummary
from tests.quality.test_render import page

# The stored object's keys, in order: the checks' numbers, then the run's baseline coverage and note.
KEYS = [
    "samples", "sampled", "available", "sample_size", "short_of_sample_size", "score_mean", "score_histogram",
    "refusals", "refusal_ratio", "refusal_ratio_ci95", "refusals_by_keyword", "refusals_by_judge",
    "hallucination_ratio", "output_tokens", "baseline_output_tokens", "output_length_mean_change_ratio", "psi",
    "ks_pvalue", "baseline_score_mean", "score_baseline_delta", "baseline_refusal_ratio", "refusal_baseline_ratio",
    "judge_errors", "judge_error_ratio", "judged_ratio", "suspect_verdicts", "failed", "judge_input_tokens",
    "judge_output_tokens", "judge_cost_usd", "judge_priced", "nonlanguage_reasons", "calibration_items",
    "calibration_answered", "calibration_exact_ratio", "calibration_within_one_ratio", "calibration_kappa",
    "calibration_refusal_agreement", "calibration_hallucination_agreement", "calibration_bias", "uncalibrated",
    "judge_changed", "judge_model", "judge_endpoint_model", "judge_response_model", "judge_fingerprint",
    "judge_template_sha256", "judge_rubric_version", "baseline_days_covered", "baseline_days", "baseline", "note",
]
# A run stored before the judge-failure fields and the baseline coverage existed.
OLD_RUN = ('{"samples": 3, "sampled": 3, "available": 3, "sample_size": 100, "short_of_sample_size": 97, '
           '"score_mean": 4.0, "score_histogram": {"1": 0, "2": 0, "3": 1, "4": 1, "5": 1}, "refusals": 0, '
           '"refusal_ratio": 0.0, "refusal_ratio_ci95": [0.0, 0.5614970317550454], "refusals_by_keyword": 0, '
           '"refusals_by_judge": 0, "hallucination_ratio": 0.0, "output_tokens": {"count": 3, "sum": 300.0, '
           '"mean": 100.0, "p50": 100.0, "p95": 100.0}, "baseline_output_tokens": null, '
           '"output_length_mean_change_ratio": null, "psi": null, "ks_pvalue": null, "baseline_score_mean": null, '
           '"score_baseline_delta": null, "baseline_refusal_ratio": null, "refusal_baseline_ratio": null, '
           '"judge_errors": 0, "judge_input_tokens": 30, "judge_output_tokens": 12, "judge_cost_usd": 0.001, '
           '"note": null}')


def run_summary() -> QualitySummary:
    judged = [Judged(4, False, False, False, None, 100 + i, reason="fine", response=f"r{i}") for i in range(9)] + [
        Judged(1, True, True, True, None, 20, reason="refused", response="no")]
    summary = summarise(judged, [90, 100, 110, 120], {"score_mean": 4.0, "refusal_ratio": 0.0}, 10, 100)
    return replace(summary, baseline_days_covered=7, baseline_days=7, baseline="ready", note=None)


def test_the_stored_object_keeps_its_keys_and_values() -> None:
    summary = run_summary()
    data = summary.to_json()
    assert list(data) == KEYS
    assert data["refusal_ratio_ci95"] == list(summary.refusal_ratio_ci95 or ())
    assert data["output_tokens"] == {"count": 10, "sum": 956.0, "mean": 95.6, "p50": 103.5, "p95": 107.55}
    text = json.dumps(data)
    assert json.dumps(QualitySummary.from_stored(text).to_json()) == text
    assert QualitySummary.from_stored(text) == QualitySummary.from_json(data)


def test_a_run_stored_by_an_older_version_loads_and_serialises_as_stored() -> None:
    summary = QualitySummary.from_stored(OLD_RUN)
    assert json.dumps(summary.to_json()) == OLD_RUN
    assert summary.score_mean == 4.0 and summary.output_tokens == LengthStats(3, 300.0, 100.0, 100.0, 100.0)
    assert summary.failed is None and not summary.has("failed") and summary.has("note")
    assert summary.baseline_ready  # compared with its baseline as every run then was
    text = page(QualityView({"m": ModelResult("2026-11-29", 1.0, summary)}))
    assert "inference_quality_run_failed{" not in text  # it does not say, so no series
    assert 'inference_quality_score_mean{model="m"} 4.0' in text


def test_an_unfinished_run_has_an_empty_summary_and_unknown_keys_survive() -> None:
    assert QualitySummary.from_stored(None).to_json() == {} == QualitySummary.from_stored("").to_json()
    newer = {"samples": 5, "a_newer_number": [1, 2]}
    assert QualitySummary.from_json(newer).to_json() == newer
    assert QualitySummary.from_json({"baseline": "baseline warming up: 1 of 7 days"}).baseline_ready is False

