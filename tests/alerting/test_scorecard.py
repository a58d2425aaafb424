"""The fault-scenario scorecard (#17 item 7) as a test: the scenarios of tests/support/scenarios.py (the
same table `python -m bench.scorecard` prints), with the monitor's clock 45x compressed.

Each fault must raise its alert, name its probable cause, raise nothing unexpected, and every
alert must resolve once the fault is cleared; the healthy run (10 monitor minutes of the demo's
load) must raise nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from tests.support.scenarios import (
    ALL_SHAPES,
    BENCH_ONLY,
    HEALTHY,
    SCENARIOS,
    Outcome,
    Scenario,
    Transition,
    run_scenario,
    score,
)

SPEED, SCRAPE_S = 45.0, 15.0  # 45x compressed; a cycle every 15 monitor seconds (the demo scrapes every 5)
FAULT_MAX_S = 900.0  # an alert not firing within 15 monitor minutes of its fault counts as missed (a KV
# cache fills in the world's time, 1/45 s per monitor second: beside two CPU hogs the starved load fills
# it slower, and kv_pressure's alert had not fired after 600 s)


def _param(scenario: Scenario) -> object:
    return pytest.param(scenario, id=scenario.name)


def _story(outcome: Outcome) -> str:
    phases = (f"fault at {outcome.fault_at or 0:.0f}s, cleared at {outcome.clear_at or 0:.0f}s, "
              f"drained at {outcome.drained_at or 0:.0f}s")
    lines = [f"{t.phase} {t.at:.0f}s {t.name} {t.status} cause={t.cause or '-'}" for t in outcome.transitions]
    return "\n".join([phases, *lines])


@pytest.mark.long
# The longest worlds first (a longer healthy stretch, a longer run): under pytest-xdist each
# scenario is a unit of its own (tests/conftest.py SPREAD), and prefix_cache_loss's two minutes
# must not start last.
@pytest.mark.parametrize("scenario", [_param(s) for s in sorted(SCENARIOS, key=lambda s: -s.healthy_s)
                                      if s.name not in BENCH_ONLY])
def test_each_fault_raises_its_alert_with_its_cause_and_nothing_else(scenario: Scenario) -> None:
    outcome = asyncio.run(run_scenario(scenario, SPEED, SCRAPE_S, FAULT_MAX_S))
    story = _story(outcome)
    assert outcome.false_alerts == [], f"alerts before the fault:\n{story}"
    assert outcome.recalled, f"{scenario.expect} did not fire:\n{story}"
    named = {scenario.cause, "unknown"} if scenario.unknown_ok else {scenario.cause}
    assert outcome.cause_named in named, f"cause {outcome.cause_named!r}, not {scenario.cause!r}:\n{story}"
    assert outcome.unexpected == set(), story
    assert outcome.still_firing == set(), f"not resolved after the fault was cleared:\n{story}"
    assert outcome.to_firing_s is not None, story
    assert outcome.to_resolved_s is not None, f"resolved before the fault was cleared:\n{story}"


@pytest.mark.long
def test_the_healthy_run_raises_no_alert() -> None:
    outcome = asyncio.run(run_scenario(dataclasses.replace(HEALTHY, healthy_s=600.0), SPEED, SCRAPE_S))
    assert outcome.transitions == [], _story(outcome)


@pytest.mark.long
def test_a_healthy_moe_model_with_a_kv_tier_and_a_pd_split_raises_no_alert() -> None:
    # The serving shapes on (#45), all three in one world, nothing wrong: their rules (alerts/kv.yml) and
    # every other stay quiet. The bench's scorecard runs each shape on its own (tests.support.scenarios.QUIET).
    outcome = asyncio.run(run_scenario(ALL_SHAPES, SPEED, SCRAPE_S))
    assert outcome.transitions == [], _story(outcome)


def test_the_books_of_an_outcome() -> None:
    # Without running a world: what counts as false, unexpected, still firing and resolved.
    scenario = Scenario("s", "a fault", (("error_burst", 0.25),), "ErrorRateHigh", "engine_errors",
                        allow=frozenset({"ThroughputDrop"}), world=frozenset({"CostIdleSpendHigh"}))
    outcome = Outcome(scenario, fault_at=100.0, clear_at=200.0, healthy_s=100.0, transitions=[
        Transition("healthy", 50.0, "CostIdleSpendHigh", "firing", "idle_spend"),  # true of the world
        Transition("fault", 130.0, "ErrorRateHigh", "firing", "engine_errors"),
        Transition("fault", 150.0, "ThroughputDrop", "firing", "traffic_drop"),
        Transition("clear", 230.0, "ThroughputDrop", "resolved", "traffic_drop"),
        Transition("clear", 260.0, "ErrorRateHigh", "resolved", "engine_errors"),
    ])
    assert outcome.false_alerts == [] and outcome.unexpected == set() and outcome.still_firing == set()
    assert outcome.world_alerts == {"CostIdleSpendHigh"} and outcome.fired() == {"ErrorRateHigh", "ThroughputDrop"}
    assert (outcome.to_firing_s, outcome.to_resolved_s, outcome.cause_verdict) == (30.0, 60.0, "right")
    assert score([outcome]).false_alerts == 0 and score([outcome]).precision == 1.0
    # Resolved while the fault still held, and not fired again: no time to resolution.
    early = Transition("fault", 190.0, "ErrorRateHigh", "resolved", "engine_errors")
    mid = dataclasses.replace(outcome, transitions=[*outcome.transitions[1:2], early])
    assert mid.still_firing == set() and mid.to_resolved_s is None
    # The same alert outside `world` is false, and one outside `allow` unexpected.
    plain = dataclasses.replace(outcome, scenario=dataclasses.replace(scenario, world=frozenset(), allow=frozenset()))
    assert [t.name for t in plain.false_alerts] == ["CostIdleSpendHigh"]
    assert plain.unexpected == {"CostIdleSpendHigh", "ThroughputDrop"} and plain.still_firing == {"CostIdleSpendHigh"}
