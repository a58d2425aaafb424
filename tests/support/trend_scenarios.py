"""The scorecard's trend rows: weeks of a model's series at compressed time, through the embedded
evaluator with its history, as `infermon serve` runs them.

A live simulator cannot run for days, so a trend world is the monitor's own exported series as a
model of time: a daily and a weekly rhythm, ±2 % noise, and the change under test (a creep of the
P99 TTFT by a few percent a day with its cause beside it, a one-time step, a holiday, or nothing),
each a function of time (monitor/sim/week.py). Only the days that decide a row's verdict are
watched: the history before them (the days the trend rules reach back, as a restarted monitor
reads them back from the store) is seeded, so a creep 21 days old is watched from its day 20 on.
From there every 5-minute tick goes through `EmbeddedEvaluator.evaluate` (the history's points
close, the trend rules of alerts/trend.yml run, a firing alert gets its context and probable cause
from the history's week-over-week facts), and each firing and resolved transition is recorded.

`python -m bench.trend_scenarios` prints the table; tests/alerting/test_scorecard_trends.py holds
each row to its verdict.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import create_engine

from monitor.alerting.context import Views
from monitor.alerting.embedded import EmbeddedEvaluator
from monitor.alerting.explain import Explainer
from monitor.alerting.model import Alert
from monitor.config import CauseSettings, HistorySettings
from monitor.history.keeper import build_keeper, memory_days
from monitor.history.store import SLOTS, STEP, StoredDay
from monitor.infra.reading import InfraView
from monitor.rulefiles.promql import Sample
from monitor.rulefiles.rules import SHIPPED_DIR, load_rules
from monitor.service.derive import Objectives, Window
from monitor.service.view import ServiceView
from monitor.sim.week import DAY, Shape, growth, holiday, product, rhythm, step
from monitor.store.models import Base
from monitor.topology import TopologyMap

START = 1_780_000_000.0 - (1_780_000_000.0 % DAY)  # a UTC midnight in 2026: the change happens here
TARGET, MODEL, NODE, GPU = "vllm-a:8000", "llama-3.1-8b", "node-1", "0"

FLAT: Shape = lambda t: 1.0  # noqa: E731


def _day(days: float) -> float:
    """A time `days` after the change."""
    return START + days * DAY


@dataclass(frozen=True)
class TrendScenario:
    """One world and its verdict; every time is in days after the change (START)."""

    name: str
    description: str
    expect: str | None  # the alert that must fire (None: nothing may)
    cause: str | None
    ttft: Shape = FLAT  # multipliers of the rhythm, by series
    load: Shape = FLAT
    kv_cache: Shape = FLAT
    gpu_power: Shape = FLAT
    within_days: float = 3.0  # the expected alert must fire by then
    # ... and must have resolved by then, not to fire again (None: it may not resolve while watched)
    resolve_by: float | None = None
    watch_from: float = 0.0  # the ticks begin here; the history before it is seeded
    run_days: float = 3.5  # days of ticks
    never: frozenset[str] = frozenset()  # alerts that must not fire even once
    first: str | None = None  # an alert that must fire before the expected one (a step, then its creep)


_AT_ONCE = 0.01  # days: a watch's first trend evaluation (its first closed point) fires what already holds
_KEEP = 0.25  # days: the trend rules' keep_firing_for (6h), after their condition last held
_WINDOW = 0.25  # days: a latency level's window (6h)

SCENARIOS: tuple[TrendScenario, ...] = (
    TrendScenario("latency_creep", "a young creep: P99 TTFT +4 %/day at flat load, KV-cache usage +3 %/day "
                  "(fragmentation)",
                  "TTFTP99Creep", "trend_cache", ttft=growth(0.04, START), kv_cache=growth(0.03, START),
                  never=frozenset({"TTFTP99Step"})),
    TrendScenario("capacity_creep", "P99 TTFT +4 %/day as the load grows +5 %/day",
                  "TTFTP99Creep", "trend_load", ttft=growth(0.04, START), load=growth(0.05, START),
                  never=frozenset({"TTFTP99Step"})),
    TrendScenario("seasonal_week", "none: a daily and a weekly rhythm, the same every week", None, None,
                  run_days=4.0),
    TrendScenario("deploy_step", "P99 TTFT +30 % from one day to the next (a deploy), flat since",
                  "TTFTP99Step", "trend_engine", ttft=step(1.3, _day(0.5)), within_days=2.5,
                  never=frozenset({"TTFTP99Creep"})),
    # A creep 21 days old: watched from its day 20 (the weeks before seeded), a creep at once, never a step.
    TrendScenario("creep_21d", "P99 TTFT +3 %/day for 21 days, KV-cache usage +3 %/day, load flat",
                  "TTFTP99Creep", "trend_cache", ttft=growth(0.03, START), kv_cache=growth(0.03, START),
                  watch_from=20.0, run_days=1.0, within_days=20.0 + _AT_ONCE, never=frozenset({"TTFTP99Step"})),
    TrendScenario("slow_creep_21d", "P99 TTFT +1.5 %/day for 21 days, load flat, nothing else moving",
                  "TTFTP99Creep", "trend_unexplained", ttft=growth(0.015, START),
                  watch_from=20.0, run_days=1.0, within_days=20.0 + _AT_ONCE, never=frozenset({"TTFTP99Step"})),
    # The week-ago comparison reads the holiday from day -0.25 (its 6-h window) to day 1.
    TrendScenario("holiday_baseline", "none: a holiday a week before (P99 TTFT at 0.7, 30 % of the traffic for a "
                  "day) under this day's week-ago comparison",
                  None, None, ttft=holiday(_day(-7.0), 0.7), load=holiday(_day(-7.0), 0.3),
                  watch_from=-0.5, run_days=2.0),
    # The days that decide it: the step turns a week old (its first days are deploy_step's). A step
    # holds until its week-ago window (6h) reaches it, then keep_firing_for; the creep's sustained
    # test (the week before up) must not take it for a creep there.
    TrendScenario("step_then_flat", "P99 TTFT +35 % at once, flat since; watched as the step turns a week old",
                  "TTFTP99Step", "trend_engine", ttft=step(1.35, START), watch_from=6.5, run_days=1.5,
                  within_days=6.5 + _AT_ONCE, resolve_by=7.0 + _WINDOW + _KEEP, never=frozenset({"TTFTP99Creep"})),
    TrendScenario("step_then_creep", "P99 TTFT +30 % at once, then from day 3 +3 %/day with KV-cache usage",
                  "TTFTP99Creep", "trend_cache", ttft=product(step(1.3, START), growth(0.03, _day(3.0))),
                  kv_cache=growth(0.03, _day(3.0)), watch_from=1.5, run_days=4.5, within_days=6.0,
                  first="TTFTP99Step"),
    # A creep ends within a `half` (1.5 days) of when it stops (its newer half's window, 6h, past the
    # stop), then keep_firing_for.
    TrendScenario("creep_stops", "P99 TTFT +3 %/day with KV-cache usage for 10 days, then flat (a restart)",
                  "TTFTP99Creep", "trend_cache", ttft=growth(0.03, START, stop=_day(10.0)),
                  kv_cache=growth(0.03, START, stop=_day(10.0)), watch_from=9.75, run_days=2.5,
                  within_days=9.75 + _AT_ONCE, resolve_by=10.0 + 1.5 + _WINDOW + _KEEP,
                  never=frozenset({"TTFTP99Step"})),
)


@dataclass
class TrendOutcome:
    scenario: TrendScenario
    fired: list[tuple[float, str, str]] = field(default_factory=list)  # (days after the change, alert, cause)
    resolved: list[tuple[float, str]] = field(default_factory=list)  # (days after the change, alert)
    seconds: float = 0.0  # the run's wall-clock time

    def first(self, name: str) -> tuple[float, str] | None:
        return next(((at, cause) for at, alert, cause in self.fired if alert == name), None)

    def resolved_at(self, name: str) -> float | None:
        """When `name` first stopped firing after it fired."""
        fired = self.first(name)
        return next((at for at, alert in self.resolved if alert == name and fired and at >= fired[0]), None)

    @property
    def recalled(self) -> bool:
        found = self.first(self.scenario.expect) if self.scenario.expect else None
        return found is not None and found[0] <= self.scenario.within_days

    @property
    def cause_named(self) -> str | None:
        found = self.first(self.scenario.expect) if self.scenario.expect else None
        return found[1] if found else None

    @property
    def unexpected(self) -> set[str]:
        allowed = {self.scenario.expect, self.scenario.first} - self.scenario.never
        return {alert for _, alert, _ in self.fired if alert not in allowed}

    def problems(self) -> list[str]:
        """What is wrong with the verdict (empty: right)."""
        s = self.scenario
        if s.expect is None:
            return [f"{alert} fired at {at:.2f}" for at, alert, _ in self.fired]
        out = [] if self.recalled else [f"{s.expect} not fired by {s.within_days:g}"]
        if self.recalled and self.cause_named != s.cause:
            out.append(f"cause {self.cause_named}, not {s.cause}")
        out += [f"{alert} fired" for alert in sorted(self.unexpected)]
        out += self._order() + self._resolution()
        return out

    def _order(self) -> list[str]:
        s, expected = self.scenario, self.first(self.scenario.expect or "")
        if s.first is None:
            return []
        before = self.first(s.first)
        if before is None or (expected is not None and before[0] > expected[0]):
            return [f"{s.first} did not fire before {s.expect}"]
        return []

    def _resolution(self) -> list[str]:
        s = self.scenario
        assert s.expect is not None
        ended = self.resolved_at(s.expect)
        if s.resolve_by is None:
            return [] if ended is None else [f"{s.expect} resolved at {ended:.2f}"]
        if ended is None or ended > s.resolve_by:
            return [f"{s.expect} not resolved by {s.resolve_by:g}"]
        again = [at for at, alert, _ in self.fired if alert == s.expect and at > ended]
        return [f"{s.expect} fired again at {again[0]:.2f}"] if again else []


class _Sink:
    def __init__(self) -> None:
        self.sent: list[Alert] = []

    def enqueue(self, alerts: Sequence[Alert], source: str) -> None:
        self.sent.extend(alerts)


def _samples(scenario: TrendScenario, t: float, rng: random.Random) -> dict[str, list[Sample]]:
    def noisy(value: float) -> float:
        return value * (1 + 0.02 * rng.uniform(-1, 1))

    load = rhythm(10.0)(t) * scenario.load(t)
    svc = {"target": TARGET, "model": MODEL, "window": "5m"}
    return {
        "inference_ttft_seconds": [({"__name__": "inference_ttft_seconds", **svc, "quantile": "0.99"},
                                    noisy(rhythm(0.3)(t) * scenario.ttft(t)))],
        "inference_requests_per_second": [({"__name__": "inference_requests_per_second", **svc}, noisy(load))],
        "inference_kv_cache_usage_ratio": [({"__name__": "inference_kv_cache_usage_ratio", "target": TARGET,
                                             "model": MODEL}, noisy(rhythm(0.4)(t) * scenario.kv_cache(t)))],
        "inference_gpu_power_watts": [({"__name__": "inference_gpu_power_watts", "node": NODE, "gpu": GPU},
                                       noisy(rhythm(450.0, 0.2)(t) * scenario.gpu_power(t)))],
    }


def _seeded(scenario: TrendScenario, rng: random.Random, begin: float, days: int) -> list[StoredDay]:
    """The `days` up to `begin` as the store holds them: a point every 5 minutes, each of the tick
    the live run would have taken just after the 5 minutes before it began (the keeper's point at
    t is the bucket (t - 5 min, t]), so the seeded weeks and the watched days sample the rhythm
    alike."""
    stored: dict[tuple[str, str, int], StoredDay] = {}
    first = int((begin - days * DAY) // STEP) * STEP
    for t in range(first + STEP, int(begin) + 1, STEP):
        for name, samples in _samples(scenario, t - STEP + 1.0, rng).items():
            for labels, value in samples:
                plain = {k: v for k, v in labels.items() if k != "__name__"}
                day, slot = divmod(t // STEP, SLOTS)
                key = (name, repr(sorted(plain.items())), day)
                if key not in stored:
                    stored[key] = StoredDay(name, plain, day, np.full(SLOTS, np.nan))
                stored[key].points[slot] = value
    return list(stored.values())


def run_trend_scenario(scenario: TrendScenario, seed: int = 7) -> TrendOutcome:
    began = time.perf_counter()
    rng = random.Random(seed)
    ruleset = load_rules([SHIPPED_DIR / "trend.yml"])
    history = build_keeper(HistorySettings(series=[]), ruleset)
    assert history is not None
    begin = _day(scenario.watch_from)
    history.load(_seeded(scenario, rng, begin, memory_days(ruleset)), begin)  # what a restart reads back
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    evaluator = EmbeddedEvaluator(ruleset, engine, _Sink(), history=history)
    clock = [begin]
    topology = TopologyMap({TARGET: ((NODE, GPU),)}, {(NODE, GPU): (TARGET,)})
    service = ServiceView(0.0, [Window("5m", 300.0)], Objectives())

    def views() -> Views:
        return Views(service, InfraView(0.0, ()), topology, history=history, at=clock[0])

    evaluator.explain = Explainer(views, CauseSettings())
    outcome = TrendOutcome(scenario)
    for tick in range(int(scenario.run_days * DAY / STEP) + 1):
        clock[0] = begin + tick * STEP + 1.0  # a tick just after each 5-minute boundary
        at = (clock[0] - START) / DAY
        for alert in evaluator.evaluate(_samples(scenario, clock[0], rng), clock[0]):
            if alert.status == "firing":
                outcome.fired.append((at, alert.name, alert.annotations.get("probable_cause", "").split(":")[0]))
            else:
                outcome.resolved.append((at, alert.name))
    engine.dispose()
    outcome.seconds = time.perf_counter() - began
    return outcome


def _watched(s: TrendScenario) -> str:
    return f"{s.watch_from:g}–{s.watch_from + s.run_days:g}"


def table(outcomes: Sequence[TrendOutcome]) -> str:
    lines = ["| scenario | change | watched | expected → cause | fired | resolved | cause named | verdict | s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        s = o.scenario
        found = o.first(s.expect) if s.expect else None
        expected = f"{s.expect} → {s.cause}" if s.expect else "nothing"
        fired = ", ".join(f"{alert} {at:.2f}" for at, alert, _ in o.fired) or "nothing"
        resolved = ", ".join(f"{alert} {at:.2f}" for at, alert in o.resolved) or "–"
        problems = o.problems()
        verdict = "right" if not problems else "WRONG: " + "; ".join(problems)
        lines.append(f"| {s.name} | {s.description} | {_watched(s)} | {expected} | {fired} | {resolved} | "
                     f"{found[1] if found else '–'} | {verdict} | {o.seconds:.0f} |")
    return "\n".join(lines)

