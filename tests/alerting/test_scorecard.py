"""The fault-scenario scorecard (#17 item 7) as a test: the scenarios of bench/scenarios.py (the
same table `python -m bench.scorecard` prints), with the monitor's clock 45x compressed.

Each fault must raise its alert, name its probable cause, raise nothing unexpected, and every
alert must resolve once the fault is cleared; the healthy run (10 monitor minutes of the demo's
load) must raise nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from bench.scenarios import HEALTHY, SCENARIOS, Outcome, Scenario, run_scenario

SPEED, SCRAPE_S = 45.0, 15.0  # 45x compressed; a cycle every 15 monitor seconds (the demo scrapes every 5)
FAULT_MAX_S = 600.0  # an alert not firing within 10 monitor minutes of its fault counts as missed (a KV
# cache fills in the simulator's real time: compressed 45x on busy cores it takes ~250-400 monitor s)


def _param(scenario: Scenario) -> object:
    return pytest.param(scenario, id=scenario.name)


def _story(outcome: Outcome) -> str:
    return "\n".join(f"{t.phase} {t.at:.0f}s {t.name} {t.status} cause={t.cause or '-'}" for t in outcome.transitions)


@pytest.mark.parametrize("scenario", [_param(s) for s in SCENARIOS])
def test_each_fault_raises_its_alert_with_its_cause_and_nothing_else(scenario: Scenario) -> None:
    outcome = asyncio.run(run_scenario(scenario, SPEED, SCRAPE_S, FAULT_MAX_S))
    story = _story(outcome)
    assert outcome.false_alerts == [], f"alerts before the fault:\n{story}"
    assert outcome.recalled, f"{scenario.expect} did not fire:\n{story}"
    named = {scenario.cause, "unknown"} if scenario.unknown_ok else {scenario.cause}
    assert outcome.cause_named in named, f"cause {outcome.cause_named!r}, not {scenario.cause!r}:\n{story}"
    assert outcome.unexpected == set(), story
    assert outcome.still_firing == set(), f"not resolved after the fault was cleared:\n{story}"
    assert outcome.to_firing_s is not None and outcome.to_resolved_s is not None


def test_the_healthy_run_raises_no_alert() -> None:
    outcome = asyncio.run(run_scenario(dataclasses.replace(HEALTHY, healthy_s=600.0), SPEED, SCRAPE_S))
    assert outcome.transitions == [], _story(outcome)
