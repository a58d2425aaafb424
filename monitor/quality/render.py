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
from monitor.quality.summary import GAUGES, LengthStats


def render_quality(view: QualityView, now: float) -> Iterator[Metric]:
    if not view.latest:
        return  # no run stored yet: no series at all (not zeros)
    families = {name: family(name) for name in GAUGES.values()}
    refusal_ratio = family("inference_quality_refusal_baseline_ratio")
    tokens = family("inference_quality_output_tokens")
    last_run = family("inference_quality_last_run_timestamp_seconds")
    age = family("inference_quality_last_run_age_seconds")
    failed = family("inference_quality_run_failed")
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
        _add_length_summary(tokens, labels, summary.output_tokens)
        last_run.add_sample(last_run.name, labels, result.finished)
        age.add_sample(age.name, labels, max(0.0, now - result.finished))
    yield from families.values()
    yield refusal_ratio
    yield tokens
    yield last_run
    yield age
    yield failed
    cost = family("inference_quality_judge_cost_usd_total")
    cost.add_sample("inference_quality_judge_cost_usd_total", {}, view.judge_cost_usd_total)
    yield cost


def _add_length_summary(fam: Metric, labels: dict[str, str], stats: LengthStats | None) -> None:
    if not stats:
        return
    for quantile, value in (("0.5", stats.p50), ("0.95", stats.p95)):
        if math.isfinite(value):
            fam.add_sample(fam.name, {**labels, "quantile": quantile}, value)
    fam.add_sample(f"{fam.name}_count", labels, float(stats.count))
    fam.add_sample(f"{fam.name}_sum", labels, stats.sum)
