"""The demo's week of history, judged by the judge simulator, is a healthy model's: no quality alert
at start from a history day (QualityScoreLow below 3.5, QualityHallucinationHigh over 5 %)."""

from __future__ import annotations

import statistics

from monitor.demo import DEMO_HISTORY_PER_DAY, DEMO_HISTORY_SEED
from monitor.sim.judge import simulated_verdict
from monitor.sim.quality_feed import simulated_history


def test_every_history_day_scores_as_a_healthy_model() -> None:
    samples = simulated_history("m", "2026-12-06", 7, DEMO_HISTORY_PER_DAY, "UTC", seed=DEMO_HISTORY_SEED)
    days: dict[int, list[dict[str, object]]] = {}
    for sample in samples:
        days.setdefault(int(sample.timestamp // 86400), []).append(simulated_verdict(sample.response))
    assert len(days) == 7
    for verdicts in days.values():
        assert statistics.mean(float(str(v["score"])) for v in verdicts) >= 3.5
        assert sum(bool(v["hallucination"]) for v in verdicts) / len(verdicts) <= 0.05
