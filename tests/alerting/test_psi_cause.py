"""QualityOutputLengthDrift fires on the population stability index (PSI) of the answers' lengths
against the baseline days: their distribution changed shape, which its mean need not show (as
many more short answers as long ones). It had no cause row: `unknown` while the PSI was 0.4."""

from __future__ import annotations

from monitor.alerting.explain import explain
from tests.alerting.contextviews import MODEL, target, views
from tests.alerting.test_causes_layers import DEFAULTS, with_quality

DRIFT = {"alertname": "QualityOutputLengthDrift", "model": MODEL, "layer": "quality"}
SCENE = views([target()], [])


def cause(**summary: float) -> str:
    return str(explain(DRIFT, with_quality(SCENE, **summary), DEFAULTS)["probable_cause"])


def test_a_length_psi_past_the_threshold_is_its_own_cause() -> None:
    text = cause(psi=0.41, output_length_mean_change_ratio=0.05)
    assert text.startswith("length_shape_changed: ") and "0.41" in text and "+5 %" in text
    assert cause(psi=0.2, output_length_mean_change_ratio=0.05).startswith("unknown")  # under 0.25: no drift


def test_a_moved_mean_still_says_length_changed() -> None:
    # the mean moved past length_change_ratio: that is the plainer fact, and it comes first
    assert cause(psi=0.6, output_length_mean_change_ratio=0.6).startswith("length_changed: ")
