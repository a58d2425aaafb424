"""One model's numbers from one day's run, as the checks compute them and the store keeps them.

The store holds the summary as a JSON object, and the API serves that object as it is. Runs
stored by earlier versions lack some keys (the judge-failure fields, the baseline coverage),
and a run still in progress has none: a field the stored object lacks reads as None and is not
written back, so a summary loaded from the store serialises to the object it was loaded from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class LengthStats:
    """Output lengths in tokens: how many, their sum, mean and two quantiles."""

    count: int
    sum: float
    mean: float
    p50: float
    p95: float

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "sum": self.sum, "mean": self.mean, "p50": self.p50, "p95": self.p95}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LengthStats:
        return cls(data["count"], data["sum"], data["mean"], data["p50"], data["p95"])


def gauge(metric: str) -> Any:
    """A summary field exported as it is: one gauge per model, named `metric` (see `GAUGES`)."""
    return field(default=None, metadata={"gauge": metric})


@dataclass(frozen=True)
class QualitySummary:
    """The run's numbers for one model (see `checks.summarise`); the field order is the JSON's.

    A field declared with `gauge(...)` is exported on /metrics as that gauge, per model, when the
    run has it: a new check is its function in `checks`, its field here and its catalog line.
    """

    samples: int | None = gauge("inference_quality_samples")  # usable verdicts (scored)
    sampled: int | None = None
    available: int | None = None  # distinct responses on the day
    sample_size: int | None = None
    short_of_sample_size: int | None = None
    score_mean: float | None = gauge("inference_quality_score_mean")
    score_histogram: Mapping[str, int] | None = None  # "1".."5" -> count
    refusals: int | None = None
    refusal_ratio: float | None = gauge("inference_quality_refusal_ratio")
    refusal_ratio_ci95: tuple[float, float] | None = None
    refusals_by_keyword: int | None = None
    refusals_by_judge: int | None = None
    hallucination_ratio: float | None = gauge("inference_quality_hallucination_ratio")
    output_tokens: LengthStats | None = None
    baseline_output_tokens: LengthStats | None = None
    output_length_mean_change_ratio: float | None = gauge("inference_quality_output_length_mean_change_ratio")
    psi: float | None = gauge("inference_quality_output_length_psi")
    ks_pvalue: float | None = gauge("inference_quality_output_length_ks_pvalue")
    baseline_score_mean: float | None = None
    score_baseline_delta: float | None = gauge("inference_quality_score_baseline_delta")
    baseline_refusal_ratio: float | None = None
    refusal_baseline_ratio: float | None = None  # None (not +Inf) after a baseline without refusals
    judge_errors: int | None = gauge("inference_quality_judge_errors")
    judge_error_ratio: float | None = gauge("inference_quality_judge_error_ratio")
    judged_ratio: float | None = gauge("inference_quality_judged_ratio")
    suspect_verdicts: int | None = gauge("inference_quality_judge_suspect_verdicts")
    failed: str | None = None  # why the run failed (the judge did); None when it did not
    judge_input_tokens: int | None = None
    judge_output_tokens: int | None = None
    judge_cost_usd: float | None = None
    judge_priced: bool | None = None  # False: no per-token price configured, the cost is not counted
    # Verdicts whose reason is not language (symbols, no words in any script): counted in suspect_verdicts.
    nonlanguage_reasons: int | None = gauge("inference_quality_judge_nonlanguage_reasons")
    # The judge on known answers (calibration.py), judged blind among the samples, never counted above.
    calibration_items: int | None = None
    calibration_answered: int | None = None
    calibration_exact_ratio: float | None = None
    calibration_within_one_ratio: float | None = None
    calibration_kappa: float | None = None
    calibration_refusal_agreement: float | None = None
    calibration_hallucination_agreement: float | None = None
    calibration_bias: float | None = None  # mean (judge - expected) score: negative is a harsher judge
    uncalibrated: str | None = None  # why the verdicts are not the model's (then `failed` says it too)
    judge_changed: str | None = None  # what changed in the judge since the baseline days (no baseline delta)
    # What judged the run: configured model, what /v1/models and the answers say, the rubric.
    judge_model: str | None = None
    judge_endpoint_model: str | None = None
    judge_response_model: str | None = None
    judge_fingerprint: str | None = None
    judge_template_sha256: str | None = None
    judge_rubric_version: str | None = None
    # Set by the run around the checks: how far its baseline days were covered, and its note.
    baseline_days_covered: int | None = None
    baseline_days: int | None = None
    baseline: str | None = None  # "ready", or why not
    note: str | None = None
    # Bookkeeping of a summary read back: the fields its stored object lacked, and keys this version
    # does not know (a newer replica's), written back as they were.
    absent: frozenset[str] = field(default=frozenset(), repr=False)
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    def has(self, name: str) -> bool:
        """Whether the stored summary holds this field (runs stored before it existed do not)."""
        return name not in self.absent

    @property
    def baseline_ready(self) -> bool:
        """Whether the run was compared with its baseline days (runs stored before coverage counted were)."""
        return not self.has("baseline") or self.baseline == "ready"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in _FIELDS:
            if name not in self.absent:
                out[name] = _plain(getattr(self, name))
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QualitySummary:
        known: dict[str, Any] = {name: data[name] for name in _FIELDS if name in data}
        for name in ("output_tokens", "baseline_output_tokens"):
            if isinstance(known.get(name), Mapping):
                known[name] = LengthStats.from_json(known[name])
        if isinstance(known.get("refusal_ratio_ci95"), list):
            known["refusal_ratio_ci95"] = tuple(known["refusal_ratio_ci95"])
        extra = MappingProxyType({key: value for key, value in data.items() if key not in _FIELDS})
        return cls(**known, absent=frozenset(name for name in _FIELDS if name not in data), extra=extra)

    @classmethod
    def from_stored(cls, text: str | None) -> QualitySummary:
        """A run's stored summary column (None or empty while the run is unfinished)."""
        return cls.from_json(json.loads(text or "{}"))


def _plain(value: Any) -> Any:
    if isinstance(value, LengthStats):
        return value.to_json()
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(QualitySummary) if f.name not in ("absent", "extra"))

# Summary field -> the gauge that exports it as it is (the fields declared with `gauge(...)`).
GAUGES: Mapping[str, str] = MappingProxyType(
    {f.name: f.metadata["gauge"] for f in fields(QualitySummary) if "gauge" in f.metadata})
