"""The scorecard's trend rows (#41, #55): weeks at compressed time through the embedded evaluator and
its history (tests/support/trend_scenarios.py, the same table `python -m bench.trend_scenarios` prints).

A creep must raise TTFTP99Creep by its fire-by time with the cause that changed beside it (the KV
cache at the same load, the load, or nothing: `trend_unexplained`), and a creep 21 days old is a
creep at once, never a step; a week with a daily and a weekly rhythm raises nothing, nor does a
holiday a week before; a one-time step is named TTFTP99Step and never a creep, and resolves once it
is a week old; a step and then a creep raises the step first; a creep that stops resolves by its
resolve-by time and does not fire again. Only the days that decide a row are ticked: the history
before them is seeded as a restarted monitor reads it back.
"""

from __future__ import annotations

import pytest

from tests.support.trend_scenarios import SCENARIOS, TrendScenario, run_trend_scenario, table


@pytest.mark.long
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_each_trend_world_raises_its_alert_with_its_cause_and_nothing_else(scenario: TrendScenario) -> None:
    outcome = run_trend_scenario(scenario)
    # the verdict as the table reads it: fired by its time with its cause, nothing else, a step
    # first where one is, resolved by its time (or never while watched) and not again
    assert outcome.problems() == [], table([outcome])
