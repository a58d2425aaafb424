"""What the shipped trend rules call each world, evaluation after evaluation, over five weeks.

Issue #55: a creep stays a creep for as long as it lasts. Each world's P99 TTFT (and for two of
them P99 TPOT) follows the day and the week, with ±2 % seeded noise, and from three weeks before
the end does one thing: creeps (3, 1.5 or 1 % a day, for all 21 days; 4 % a day for the last 5;
faster and faster), steps once, creeps and stops, steps and then creeps, has a quiet holiday or
an outage, or nothing. The embedded trend evaluator reads the loaded `alerts/trend.yml` over that
history every 3 hours, from the first instant its rules can see their whole reach back to the
end; each world's verdicts over time are asserted: who is named, how soon, and that a name once
given holds. A verdict is the rule's expression at that instant, stricter than the alert itself
(which `keep_firing_for` holds for 6 hours over a gap).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from monitor.rulefiles.promql import HistoryAt
from monitor.rulefiles.rules import SHIPPED_DIR, AlertRule, load_rules
from monitor.rulefiles.templates import TemplateData
from monitor.sim.week import growth, holiday, product, rhythm, step
from tests.history.worlds import DAY, Tracks, World

END = 1_780_000_000.0  # a Thursday in 2026, 18:26:40 UTC: the last evaluation
START = END - 35 * DAY  # the first point
BEGAN = END - 21 * DAY  # when the 21-day worlds change
EVERY = 3 * 3600.0
TTFT = "inference_ttft_seconds"
TPOT = "inference_tpot_seconds"

ttft = rhythm(0.3)
tpot = rhythm(0.015, 0.1)
TTFT_WORLDS: dict[str, Callable[[float], float]] = {
    "creep-3": product(ttft, growth(0.03, BEGAN)),
    "creep-1.5": product(ttft, growth(0.015, BEGAN)),
    "creep-1": product(ttft, growth(0.01, BEGAN)),
    "young-creep": product(ttft, growth(0.04, END - 5 * DAY)),
    "accelerating": product(ttft, growth(0.01, BEGAN), growth(0.02, END - 10 * DAY)),
    "step": product(ttft, step(1.35, END - 3 * DAY)),
    "step-then-creep": product(ttft, step(1.3, END - 12 * DAY), growth(0.03, END - 6 * DAY)),
    "stopped-creep": product(ttft, growth(0.03, BEGAN, END - 7 * DAY)),
    # a holiday a week before the end (its echo a week later is in the last half day) and one early
    # enough that the evaluations compare with it from one and from two weeks later
    "holiday": product(ttft, holiday(END - 7.5 * DAY, 0.7, DAY)),
    "holiday-early": product(ttft, holiday(END - 16 * DAY, 0.7, DAY)),
    "outage": product(ttft, holiday(END - 7 * DAY, 3.0, 4 * 3600)),
    "outage-early": product(ttft, holiday(END - 16 * DAY, 3.0, 4 * 3600)),
    "seasonal": ttft,
}
TPOT_WORLDS = {"creep-3": product(tpot, growth(0.03, BEGAN)), "step": product(tpot, step(1.35, END - 3 * DAY))}
QUIET = ("holiday", "holiday-early", "outage", "outage-early", "seasonal")


def labels(model: str) -> tuple[tuple[str, str], ...]:
    return (("model", model), ("quantile", "0.99"), ("target", "gpu:8000"), ("window", "5m"))


WORLDS = [World(TTFT, {labels(model): shape for model, shape in TTFT_WORLDS.items()}),
          World(TPOT, {labels(model): shape for model, shape in TPOT_WORLDS.items()})]


@dataclass(frozen=True)
class Fired:
    alert: str  # TTFTP99Creep
    value: float  # the rule's value (a creep's: its growth in percent a day)
    description: str


Verdicts = dict[tuple[str, str], dict[float, list[Fired]]]  # (metric, model) -> instant -> what fired


def the_rules() -> list[AlertRule]:
    """The shipped trend rules that read these metrics."""
    return [rule for rule in load_rules([SHIPPED_DIR / "trend.yml"]).rules if rule.metrics & {TTFT, TPOT}]


def reach_of(rules: list[AlertRule]) -> float:
    """How far back the rules read."""
    return max(rule.expr.longest_reach for rule in rules if rule.trend)


def instants(reach: float) -> list[float]:
    """Every 3 hours back from the end (17 s off the 5-minute grid), to where the rules see their reach."""
    out, at = [], END - 17.0
    while at - reach >= START:
        out.append(at)
        at -= EVERY
    return out[::-1]


@pytest.fixture(scope="module")
def verdicts() -> Verdicts:
    rules = the_rules()
    metric_of = {rule.name: TTFT if TTFT in rule.metrics else TPOT for rule in rules}
    history = Tracks(WORLDS, START, END)
    out: Verdicts = {(world.name, dict(key)["model"]): {} for world in WORLDS for key in world.series}
    for at in instants(reach_of(rules)):
        here = HistoryAt(history, at)  # one per instant: the rules share its levels
        for key in out:
            out[key][at] = []
        for rule in rules:
            for series, value in rule.expr.eval(here):
                text = rule.annotations["description"].render(TemplateData(series, value))
                out[(metric_of[rule.name], series["model"])][at].append(Fired(rule.name, value, text))
    return out


def named(verdicts: Verdicts, metric: str, model: str, kind: str) -> list[float]:
    """The instants at which the world's `kind` (Creep, Step) alert fired."""
    return [at for at, fired in verdicts[(metric, model)].items() if any(f.alert.endswith(kind) for f in fired)]


def every_instant(verdicts: Verdicts, metric: str, model: str, since: float, until: float = END) -> list[float]:
    return [at for at in verdicts[(metric, model)] if since <= at <= until]


def test_the_evaluations_run_from_the_first_instant_the_rules_see_their_reach_to_the_end(verdicts: Verdicts) -> None:
    reach = reach_of(the_rules())
    times = sorted(verdicts[(TTFT, "seasonal")])
    assert START <= times[0] - reach < START + EVERY
    assert END - times[-1] < 60 and times[-1] - times[0] > 2 * 7 * DAY


RAISED = {  # every alert each world raises at any instant
    **{(TTFT, model): {"TTFTP99Creep"} for model in ("creep-3", "creep-1.5", "creep-1", "young-creep",
                                                     "accelerating", "stopped-creep")},
    (TTFT, "step"): {"TTFTP99Step"},
    (TTFT, "step-then-creep"): {"TTFTP99Step", "TTFTP99Creep"},
    **{(TTFT, model): set() for model in QUIET},
    (TPOT, "creep-3"): {"TPOTP99Creep"},
    (TPOT, "step"): {"TPOTP99Step"},
}


def test_each_world_raises_its_own_alerts_and_no_other(verdicts: Verdicts) -> None:
    raised = {key: {f.alert for fired in by_instant.values() for f in fired} for key, by_instant in verdicts.items()}
    assert raised == RAISED


CREEPS = [  # metric, model, when it began, named at most this long after (or after the first instant)
    pytest.param(TTFT, "creep-3", BEGAN, 0.0, id="TTFT-3%-21d"),
    pytest.param(TPOT, "creep-3", BEGAN, 0.0, id="TPOT-3%-21d"),
    pytest.param(TTFT, "creep-1.5", BEGAN, 6.5 * DAY, id="TTFT-1.5%-21d"),
    pytest.param(TTFT, "creep-1", BEGAN, 9 * DAY, id="TTFT-1%-21d"),
    pytest.param(TTFT, "young-creep", END - 5 * DAY, 3 * DAY, id="TTFT-4%-5d"),
]


@pytest.mark.parametrize(("metric", "model", "began", "within"), CREEPS)
def test_a_creep_is_a_creep_at_every_evaluation_once_named_and_never_a_step(
        verdicts: Verdicts, metric: str, model: str, began: float, within: float) -> None:
    creep = named(verdicts, metric, model, "Creep")
    first_instant = min(verdicts[(metric, model)])
    assert creep, f"{model} was never named a creep"
    assert creep[0] - max(began, first_instant) <= within, (model, (creep[0] - began) / DAY)
    assert creep == every_instant(verdicts, metric, model, creep[0])  # from then on, without a gap
    assert named(verdicts, metric, model, "Step") == []


@pytest.mark.parametrize(("metric", "model", "per_day"), [
    pytest.param(TTFT, "creep-3", 3.0, id="TTFT-3%"), pytest.param(TPOT, "creep-3", 3.0, id="TPOT-3%"),
    pytest.param(TTFT, "creep-1.5", 1.5, id="TTFT-1.5%"), pytest.param(TTFT, "creep-1", 1.0, id="TTFT-1%")])
def test_a_three_week_creep_shows_its_growth_a_day_at_the_end(
        verdicts: Verdicts, metric: str, model: str, per_day: float) -> None:
    last = verdicts[(metric, model)][max(verdicts[(metric, model)])]
    assert [f.value for f in last if f.alert.endswith("Creep")] == [pytest.approx(per_day, abs=0.3)]


def test_an_accelerating_creep_is_a_creep_from_its_acceleration_on(verdicts: Verdicts) -> None:
    creep = named(verdicts, TTFT, "accelerating", "Creep")
    assert creep and creep[0] - BEGAN <= 9 * DAY
    faster = END - 10 * DAY
    assert [at for at in creep if at >= faster] == every_instant(verdicts, TTFT, "accelerating", faster)
    assert named(verdicts, TTFT, "accelerating", "Step") == []


@pytest.mark.parametrize("metric", [TTFT, TPOT])
def test_a_step_is_a_step_once_it_has_held_and_never_a_creep(verdicts: Verdicts, metric: str) -> None:
    stepped_at = END - 3 * DAY
    steps = named(verdicts, metric, "step", "Step")
    assert steps and stepped_at < steps[0] <= stepped_at + 2 * DAY, [(at - stepped_at) / DAY for at in steps[:1]]
    assert steps == every_instant(verdicts, metric, "step", steps[0])
    assert named(verdicts, metric, "step", "Creep") == []


@pytest.mark.parametrize("model", QUIET)
def test_a_holiday_an_outage_and_the_seasons_raise_nothing(verdicts: Verdicts, model: str) -> None:
    fired = {(at - END) / DAY: [f.alert for f in found] for at, found in verdicts[(TTFT, model)].items() if found}
    assert fired == {}


def test_a_creep_that_stops_resolves_within_a_day_and_a_half_and_no_step_follows(verdicts: Verdicts) -> None:
    stopped = END - 7 * DAY
    creep = named(verdicts, TTFT, "stopped-creep", "Creep")
    assert creep == every_instant(verdicts, TTFT, "stopped-creep", creep[0], creep[-1])
    assert creep[0] == min(verdicts[(TTFT, "stopped-creep")])  # a creep from the first instant on
    assert stopped <= creep[-1] < stopped + 1.5 * DAY, (creep[-1] - stopped) / DAY
    after = {at: found for at, found in verdicts[(TTFT, "stopped-creep")].items() if at > creep[-1] and found}
    assert after == {}


def test_a_step_then_a_creep_is_a_step_then_a_creep(verdicts: Verdicts) -> None:
    stepped_at, creeping_from = END - 12 * DAY, END - 6 * DAY
    steps = named(verdicts, TTFT, "step-then-creep", "Step")
    creep = named(verdicts, TTFT, "step-then-creep", "Creep")
    assert steps and stepped_at < steps[0] <= stepped_at + 2 * DAY
    assert every_instant(verdicts, TTFT, "step-then-creep", steps[0], creeping_from) == \
        [at for at in steps if at <= creeping_from]  # a step for as long as it is flat
    assert creep and creeping_from < creep[0] <= creeping_from + 3 * DAY, (creep[0] - creeping_from) / DAY
    assert creep == every_instant(verdicts, TTFT, "step-then-creep", creep[0])
    assert max(steps) < creep[0]  # no step once the creep is named, and never both at once


def creeping_worlds() -> Iterator[tuple[str, str]]:
    yield from ((TTFT, model) for model in TTFT_WORLDS if "creep" in model or model == "accelerating")
    yield TPOT, "creep-3"


def test_no_alert_on_a_creeping_world_says_it_no_longer_grows(verdicts: Verdicts) -> None:
    said = [(model, (at - END) / DAY, f.alert, f.description) for metric, model in creeping_worlds()
            for at, fired in verdicts[(metric, model)].items() for f in fired]
    assert said  # the creeping worlds fire
    assert [entry for entry in said if "no longer grows" in entry[3]] == []
    assert all("a creep" in description for _, _, alert, description in said if alert.endswith("Creep"))
