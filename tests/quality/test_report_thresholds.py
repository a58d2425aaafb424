"""The report flags a number exactly where an alert rule on its metric fires: its thresholds are the
rule files' (alerts/quality.yml), not copies of them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from monitor.quality.report import ModelReport, render_report, shipped_thresholds
from monitor.quality.store import QualityRun
from monitor.quality.summary import QualitySummary
from monitor.rulefiles.thresholds import ALERTS_DIR, rule_thresholds

# card label -> the metric whose rules flag it
FLAGGED = {
    "score mean": "inference_quality_score_mean",
    "vs baseline": "inference_quality_score_baseline_delta",
    "refusals": "inference_quality_refusal_ratio",
    "hallucinations": "inference_quality_hallucination_ratio",
    "length PSI": "inference_quality_output_length_psi",
    "mean length change": "inference_quality_output_length_mean_change_ratio",
}


def flagged(summary: dict[str, object], alerts_dir: Path | None = None) -> set[str]:
    run = QualityRun(date="2026-11-29", model="m", status="done", started=0.0, finished=1.0, available=100)
    report = ModelReport(run, QualitySummary.from_json(summary), [], [])
    thresholds = None if alerts_dir is None else rule_thresholds(alerts_dir)
    page = render_report("2026-11-29", [report], thresholds=thresholds)
    return set(re.findall(r'<div class="card bad">([^<]+)<b>', page))


def test_every_flagged_card_has_a_shipped_rule() -> None:
    metrics = {r.metric for r in shipped_thresholds()}
    assert set(FLAGGED.values()) <= metrics


def test_the_flags_follow_the_shipped_rules() -> None:
    healthy = {"score_mean": 4.1, "score_baseline_delta": -0.1, "refusal_ratio": 0.02, "hallucination_ratio": 0.01,
               "psi": 0.03, "ks_pvalue": 0.6, "output_length_mean_change_ratio": 0.05}
    assert flagged(healthy) == set()
    worse = {"score_mean": 3.4, "score_baseline_delta": -0.7, "refusal_ratio": 0.06, "hallucination_ratio": 0.06,
             "psi": 0.3, "ks_pvalue": 0.01, "output_length_mean_change_ratio": -0.31}
    assert flagged(worse) == {*FLAGGED, "KS p-value"}
    # QualityScoreBelowBaseline fires at -0.5 itself (<=), and so does the card
    assert "vs baseline" in flagged({**healthy, "score_baseline_delta": -0.5})


def test_changing_the_rule_file_changes_the_flag(tmp_path: Path) -> None:
    shutil.copytree(ALERTS_DIR, tmp_path / "alerts")
    rules = tmp_path / "alerts" / "quality.yml"
    text = rules.read_text()
    assert "expr: inference_quality_output_length_psi > 0.25" in text
    rules.write_text(text.replace("expr: inference_quality_output_length_psi > 0.25",
                                  "expr: inference_quality_output_length_psi > 0.5"))
    summary = {"psi": 0.3}
    assert "length PSI" in flagged(summary, ALERTS_DIR)
    assert "length PSI" not in flagged(summary, tmp_path / "alerts")
