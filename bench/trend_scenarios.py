"""The scorecard's trend rows: weeks of a model's series at compressed time, through the embedded
evaluator with its history, as `infermon serve` runs them.

A live simulator cannot run for days, so a trend world is the monitor's own exported series as a
model of time: a daily and a weekly rhythm, ±2 % noise, and the change under test (a creep of the
P99 TTFT by a few percent a day with its cause beside it, a one-time step, or nothing). The two
weeks before the change are read back from the store as a restarted monitor does; from the change
on, every 5-minute tick goes through `EmbeddedEvaluator.evaluate` (the history's points close, the
trend rules of alerts/trend.yml run, a firing alert gets its context and probable cause from the
history's week-over-week facts).

    python -m bench.trend_scenarios        # the table
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import create_engine

from monitor.alerting.context import Views
from monitor.alerting.embedded import EmbeddedEvaluator
from monitor.alerting.explain import Explainer
from monitor.alerting.model import Alert
from monitor.config import CauseSettings, HistorySettings
from monitor.history.keeper import build_keeper
from monitor.history.store import SLOTS, STEP, StoredDay
from monitor.infra.reading import InfraView
from monitor.rulefiles.expr import Sample
from monitor.rulefiles.rules import SHIPPED_DIR, load_rules
from monitor.service.derive import Objectives, Window
from monitor.service.view import ServiceView
from monitor.sim.week import DAY, Shape, growth, rhythm, step
from monitor.store.models import Base
from monitor.topology import TopologyMap

START = 1_780_000_000.0 - (1_780_000_000.0 % DAY)  # a UTC midnight in 2026: the change happens here
SEEDED_DAYS = 15.0  # history before the change, read back as a restarted monitor does
TARGET, MODEL, NODE, GPU = "vllm-a:8000", "llama-3.1-8b", "node-1", "0"

FLAT: Shape = lambda t: 1.0  # noqa: E731


@dataclass(frozen=True)
class TrendScenario:
    name: str
    description: str
    expect: str | None  # the alert that must fire (None: nothing may)
    cause: str | None
    ttft: Shape = FLAT  # multipliers of the rhythm, by series
    load: Shape = FLAT
    kv_cache: Shape = FLAT
    gpu_power: Shape = FLAT
    within_days: float = 3.0  # the expected alert must fire this soon after the change
    run_days: float = 3.5
    never: frozenset[str] = frozenset()  # alerts that must not fire even once


SCENARIOS: tuple[TrendScenario, ...] = (
    TrendScenario("latency_creep", "P99 TTFT +4 %/day at flat load, KV-cache usage growing with it (fragmentation)",
                  "TTFTP99Creep", "trend_cache", ttft=growth(0.04, START), kv_cache=growth(0.03, START),
                  never=frozenset({"TTFTP99Step"})),
    TrendScenario("capacity_creep", "P99 TTFT +4 %/day as the load grows +5 %/day",
                  "TTFTP99Creep", "trend_load", ttft=growth(0.04, START), load=growth(0.05, START),
                  never=frozenset({"TTFTP99Step"})),
    TrendScenario("seasonal_week", "a daily and a weekly rhythm, the same every week", None, None, run_days=4.0),
    TrendScenario("deploy_step", "P99 TTFT +30 % from one day to the next (a deploy), flat since",
                  "TTFTP99Step", "trend_engine", ttft=step(1.3, START + 0.5 * DAY), within_days=2.5,
                  never=frozenset({"TTFTP99Creep"})),
)


@dataclass
class TrendOutcome:
    scenario: TrendScenario
    fired: list[tuple[float, str, str]] = field(default_factory=list)  # (days after the change, alert, cause)

    def first(self, name: str) -> tuple[float, str] | None:
        return next(((at, cause) for at, alert, cause in self.fired if alert == name), None)

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
        allowed = {self.scenario.expect} - self.scenario.never
        return {alert for _, alert, _ in self.fired if alert not in allowed}


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


def _seeded(scenario: TrendScenario, rng: random.Random) -> list[StoredDay]:
    """The weeks before the change as the store holds them: a point every 5 minutes."""
    days: dict[tuple[str, str, int], StoredDay] = {}
    first = int((START - SEEDED_DAYS * DAY) // STEP) * STEP
    for t in range(first, int(START), STEP):
        for name, samples in _samples(scenario, float(t), rng).items():
            for labels, value in samples:
                plain = {k: v for k, v in labels.items() if k != "__name__"}
                day, slot = divmod(t // STEP, SLOTS)
                key = (name, repr(sorted(plain.items())), day)
                if key not in days:
                    days[key] = StoredDay(name, plain, day, np.full(SLOTS, np.nan))
                days[key].points[slot] = value
    return list(days.values())


def run_trend_scenario(scenario: TrendScenario, seed: int = 7) -> TrendOutcome:
    rng = random.Random(seed)
    ruleset = load_rules([SHIPPED_DIR / "trend.yml"])
    history = build_keeper(HistorySettings(series=[]), ruleset)
    assert history is not None
    history.load(_seeded(scenario, rng), START)
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    sink = _Sink()
    evaluator = EmbeddedEvaluator(ruleset, engine, sink, history=history)
    clock = [START]
    topology = TopologyMap({TARGET: ((NODE, GPU),)}, {(NODE, GPU): (TARGET,)})
    service = ServiceView(0.0, [Window("5m", 300.0)], Objectives())

    def views() -> Views:
        return Views(service, InfraView(0.0, ()), topology, history=history, at=clock[0])

    evaluator.explain = Explainer(views, CauseSettings())
    outcome = TrendOutcome(scenario)
    ticks = int(scenario.run_days * DAY / STEP)
    for tick in range(1, ticks + 1):
        clock[0] = START + tick * STEP + 1.0  # a tick just after each 5-minute boundary
        for alert in evaluator.evaluate(_samples(scenario, clock[0], rng), clock[0]):
            if alert.status == "firing":
                cause = alert.annotations.get("probable_cause", "").split(":")[0]
                outcome.fired.append(((clock[0] - START) / DAY, alert.name, cause))
    engine.dispose()
    return outcome


def table(outcomes: Sequence[TrendOutcome]) -> str:
    lines = ["| scenario | expected | fired (days after the change) | cause | verdict |", "|---|---|---|---|---|"]
    for o in outcomes:
        s = o.scenario
        found = o.first(s.expect) if s.expect else None
        fired = ", ".join(f"{alert} {at:.2f}" for at, alert, _ in o.fired) or "nothing"
        right = (o.recalled and o.cause_named == s.cause and not o.unexpected) if s.expect else not o.fired
        lines.append(f"| {s.name} | {s.expect or 'nothing'} | {fired} | {found[1] if found else '–'} | "
                     f"{'right' if right else 'WRONG'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table([run_trend_scenario(s) for s in SCENARIOS]))
