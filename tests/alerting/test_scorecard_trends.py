"""The scorecard's trend rows (#41): weeks at compressed time through the embedded evaluator and its
history (bench/trend_scenarios.py, the same table `python -m bench.trend_scenarios` prints).

A creep of +4 %/day must raise TTFTP99Creep within 3 days with the cause that changed beside it
(the KV cache at the same load, or the load); a week with a daily and a weekly rhythm raises
nothing; a one-time step is named TTFTP99Step and never a creep.
"""

from __future__ import annotations

import pytest

from bench.trend_scenarios import SCENARIOS, TrendScenario, run_trend_scenario, table


@pytest.mark.long
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_each_trend_world_raises_its_alert_with_its_cause_and_nothing_else(scenario: TrendScenario) -> None:
    outcome = run_trend_scenario(scenario)
    story = table([outcome])
    if scenario.expect is None:
        assert outcome.fired == [], story
        return
    assert outcome.recalled, story
    assert outcome.cause_named == scenario.cause, story
    assert outcome.unexpected == set(), story
    assert not any(alert in scenario.never for _, alert, _ in outcome.fired), story
