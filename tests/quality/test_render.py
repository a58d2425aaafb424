"""Quality metrics: what a view renders equals the catalog, and promtool accepts the page."""

from __future__ import annotations

import math
import subprocess
from dataclasses import replace

from monitor.catalog import CATALOG
from monitor.exporter import make_registry, render_text
from monitor.quality.checks import Judged, summarise
from monitor.quality.layer import ModelResult, QualityView
from monitor.quality.render import render_quality
from monitor.quality.summary import GAUGES
from tests.conftest import require_binary


def page(view: QualityView, now: float = 2_000.0) -> str:
    return render_text(make_registry([lambda: render_quality(view, now)])).decode()


def view() -> QualityView:
    judged = [Judged(4, False, False, False, None, 100 + i, reason="fine", response=f"r{i}") for i in range(9)] + [
        Judged(1, True, True, True, None, 20, reason="refused", response="no")]
    summary = summarise(judged, [90, 100, 110, 120], {"score_mean": 4.0, "refusal_ratio": 0.0}, 10, 100)
    summary = replace(summary, calibration_items=42, calibration_answered=41, calibration_exact_ratio=0.8,
                      calibration_within_one_ratio=1.0, calibration_kappa=0.9, calibration_refusal_agreement=1.0,
                      calibration_hallucination_agreement=0.95, calibration_bias=-0.1, judge_model="judge-x")
    return QualityView({"qwen3-8b": ModelResult("2026-11-29", 1_000.0, summary)}, judge_cost_usd_total=0.25)


def test_families_equal_the_catalog() -> None:
    text = page(view())
    emitted = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert emitted == {name for name, d in CATALOG.items() if d.layer == "quality"}


def test_values() -> None:
    text = page(view())
    assert 'inference_quality_refusal_baseline_ratio{model="qwen3-8b"} +Inf' in text  # none on the baseline days
    assert 'inference_quality_last_run_age_seconds{model="qwen3-8b"} 1000.0' in text
    assert 'inference_quality_score_baseline_delta{model="qwen3-8b"} -0.2999' in text
    assert "inference_quality_judge_cost_usd_total 0.25" in text
    assert 'inference_quality_run_failed{model="qwen3-8b"} 0.0' in text
    assert 'inference_quality_judged_ratio{model="qwen3-8b"} 1.0' in text
    assert "# TYPE inference_quality_output_tokens summary" in text


def test_every_gauge_field_is_exported_as_its_value() -> None:
    """A field declared with gauge(...) is on the page with the summary's number, under its name."""
    summary = view().latest["qwen3-8b"].summary
    text = page(view())
    assert len(GAUGES) >= 12
    for attribute, name in GAUGES.items():
        value = getattr(summary, attribute)
        assert value is not None, attribute
        line = next(line for line in text.splitlines() if line.startswith(f'{name}{{model="qwen3-8b"}} '))
        assert math.isclose(float(line.split()[-1]), float(value), rel_tol=1e-12), attribute


def test_nothing_before_the_first_run() -> None:
    assert page(QualityView()) == ""


def test_missing_numbers_are_absent_not_zero() -> None:
    summary = summarise([Judged(None, None, False, None, "timed out", 50)], [], {}, 1, 100)
    text = page(QualityView({"m": ModelResult("2026-11-29", 1.0, summary)}))
    assert "inference_quality_score_mean" not in text and "inference_quality_output_length_psi" not in text
    assert 'inference_quality_judge_errors{model="m"} 1.0' in text
    assert 'inference_quality_run_failed{model="m"} 1.0' in text and 'judge_error_ratio{model="m"} 1.0' in text
    assert summary.refusal_ratio is not None and not math.isnan(summary.refusal_ratio)


def test_promtool_accepts_the_page(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = subprocess.run([require_binary("promtool"), "check", "metrics"], input=page(view()),
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
