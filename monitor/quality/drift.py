"""The judge's own drift: did the judge change between the baseline days and today?

A score is the model's answers seen through one judge. Swap the judge (another model, a new
version behind the same API name, another rubric) and every score moves while the model stands
still. Each run records what judged it (`JudgeIdentity`) and how it did on the known answers
(calibration.py); a run whose judge differs from its baseline days' is not compared with them —
its score change is the judge's, said in `judge_changed`, and a re-judge of the baseline days
with today's judge makes the comparison like for like again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from monitor.quality.summary import QualitySummary

# The calibration numbers that say the judge moved: the mean signed difference on the known
# answers (a judge one point harsher moves it by ~0.8 on the shipped set, where an honest judge's
# run-to-run noise is under 0.1), and kappa (its spread on 40 items is ~0.05 for the same judge).
BIAS_CHANGE = 0.5
KAPPA_CHANGE = 0.2
# What names the judge; a change in any is a changed judge. The fingerprint is recorded but not
# compared: OpenAI moves it with backend changes every few weeks, and the calibration catches a
# change that matters.
IDENTITY_FIELDS = (("judge_model", "model"), ("judge_endpoint_model", "endpoint model"),
                   ("judge_response_model", "answering model"), ("judge_template_sha256", "prompt template"),
                   ("judge_rubric_version", "rubric version"))


@dataclass(frozen=True)
class JudgeIdentity:
    model: str  # configured
    endpoint_model: str | None  # what GET /v1/models lists: the configured id if listed, else the first
    response_model: str | None  # what most answers' `model` said
    fingerprint: str | None  # what most answers' `system_fingerprint` said
    template_sha256: str
    rubric_version: str

    def fields(self) -> dict[str, Any]:
        """As the summary's `judge_*` fields."""
        return {"judge_model": self.model, "judge_endpoint_model": self.endpoint_model,
                "judge_response_model": self.response_model, "judge_fingerprint": self.fingerprint,
                "judge_template_sha256": self.template_sha256, "judge_rubric_version": self.rubric_version}


def endpoint_model(configured: str, listed: Sequence[str] | None) -> str | None:
    if not listed:
        return None
    return configured if configured in listed else listed[0]


def judge_changed(today: QualitySummary, baseline: Sequence[QualitySummary]) -> str | None:
    """What changed in the judge from the baseline days' runs to today's (None: nothing seen)."""
    changes: list[str] = []
    for name, label in IDENTITY_FIELDS:
        now = getattr(today, name)
        before = sorted({getattr(s, name) for s in baseline if getattr(s, name) is not None})
        if now is not None and before and now not in before:
            changes.append(f"{label} {', '.join(before)} → {now}")
    calibrated = [s for s in baseline if s.calibration_bias is not None and not s.uncalibrated]
    if today.calibration_bias is not None and calibrated:
        bias = sum(s.calibration_bias or 0.0 for s in calibrated) / len(calibrated)
        if abs(today.calibration_bias - bias) >= BIAS_CHANGE:
            way = "lower" if today.calibration_bias < bias else "higher"
            changes.append(f"it scores known answers {abs(today.calibration_bias - bias):.2f} {way} than on the "
                           f"baseline days (mean difference {bias:+.2f} → {today.calibration_bias:+.2f})")
    kappas = [s.calibration_kappa for s in calibrated if s.calibration_kappa is not None]
    if today.calibration_kappa is not None and kappas:
        kappa = sum(kappas) / len(kappas)
        if abs(today.calibration_kappa - kappa) >= KAPPA_CHANGE:
            changes.append(f"κ on known answers {kappa:.2f} → {today.calibration_kappa:.2f}")
    if not changes:
        return None
    prints = sorted({s.judge_fingerprint for s in baseline if s.judge_fingerprint})
    if today.judge_fingerprint and prints and today.judge_fingerprint not in prints:
        changes.append(f"system_fingerprint {', '.join(prints)} → {today.judge_fingerprint}")
    return "judge changed: " + "; ".join(changes)
