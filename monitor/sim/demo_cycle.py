"""What the demo's fault cycle drives besides the simulated engine: the load generator's rate
(`traffic_dip`) and where the replayed H200 recording plays (`gpu_hold`; otherwise the part of
the recording that matches what the engine does: idle, serving, queueing), both read from the
same schedule at the same instant as the engine's own faults, so each alert of the cycle comes
with the GPU and traffic it is meant to show (see `faults.demo_schedule`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from monitor.config import SHIPPED_RULE_FILES, Duration
from monitor.rulefiles.rules import resolve
from monitor.sim.engine import SimulatedEngine
from monitor.sim.load import LoadConfig, run_load, sleep_until

LOAD_SLICE_S = 15.0  # the load runs in slices this long, each at the rate the schedule says


# Where the recording plays when no `gpu_hold` is active, by what the engine does at that moment
# (seconds into the H200 recording): nothing to do, idle (0 %, ~120 W); requests running, the 30 %
# duty part (~350 W); requests waiting, the burn (99 %, at its power cap: the queue has the GPU).
IDLE_PART, DUTY_PART, BURN_PART = (6.0, 21.0), (66.0, 85.0), (22.0, 51.0)
BUSY_MEMORY_S = 5.0  # an engine that ran a request this recently is still busy (no 0 % between requests)
QUEUED = 3  # requests waiting beyond the next step's admission: a queue (one arrival waits a step anyway)


class HeldReplayClock:
    """The clock of a replayed recording, following the simulated engine: the part of the recording
    that matches what the engine does (IDLE_PART, DUTY_PART, BURN_PART), except that while a
    `gpu_hold` is active it reads as `hold` seconds into the current loop of the recording.
    It never runs backwards, so the energy counter only counts up."""

    def __init__(self, sim: SimulatedEngine, period_s: float, clock: Callable[[], float] | None = None) -> None:
        self.sim, self.period_s = sim, period_s
        self.clock = clock or sim.now  # the engine's clock: the GPU keeps the world's time
        self.origin: float | None = None
        self.last = -math.inf
        self.busy_at = -math.inf

    def __call__(self) -> float:
        now = self.clock()
        if self.origin is None:  # the replay's nvmlInit: playback starts here
            self.origin = self.last = now
            return now
        loops = (now - self.origin) // self.period_s
        reading = self.origin + loops * self.period_s + self.position(now)
        while reading < self.last:  # a later loop of the recording, not an earlier moment
            reading += self.period_s
        self.last = reading
        return reading

    def position(self, now: float) -> float:
        hold = self.sim.effects(self.sim.now()).gpu_hold_s
        if hold is not None:
            return hold % self.period_s
        if self.sim.running:
            self.busy_at = now
        start, end = (BURN_PART if len(self.sim.waiting) >= QUEUED else
                      DUTY_PART if now - self.busy_at < BUSY_MEMORY_S else IDLE_PART)
        return start + (now - (self.origin or 0.0)) % (end - start)


async def scheduled_load(sim_url: str, sim: SimulatedEngine, base: LoadConfig, slice_s: float = LOAD_SLICE_S) -> None:
    """`base` for its whole duration, in slices whose rate follows `traffic_dip`; a slice starts
    while the previous one still drains, so the traffic has no gaps. Slices and the requests in
    them keep the engine's clock (`sim.now`), whatever clock that is."""
    running: set[asyncio.Task[object]] = set()
    start = sim.now()
    deadline = start + base.duration_s
    try:
        for number in itertools.count(1):
            if sim.now() >= deadline:
                break
            rps = base.rps * sim.effects(sim.now()).traffic_mult
            piece = dataclasses.replace(base, rps=rps, duration_s=slice_s, seed=None)
            task: asyncio.Task[object] = asyncio.create_task(run_load(sim_url, piece, clock=sim.now))
            running.add(task)
            task.add_done_callback(running.discard)
            await sleep_until(sim.now, start + number * slice_s)
    finally:
        for task in list(running):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


DEMO_FOR_S = 30.0  # the demo's 90-s faults must outlast `for`
# The alerts the fault cycle shows (faults.demo_schedule): short `for`, and a short `keep_firing_for`
# so one slot's alert resolves before the next slot's fault (three TTFT slots in a row).
CYCLE_ALERTS = frozenset({"TTFTP99High", "ErrorRateHigh", "ThroughputDrop", "TargetDown"})
CYCLE_KEEP_FIRING = "15s"
# Every other rule keeps its shipped `for` (a GPU busy for one 90-s slot is not saturated) and
# holds its alert 5 minutes after the condition clears, so a value at the threshold does not flap.
KEEP_FIRING = "5m"
# ...except the rule groups on numbers that are one per run (alerts/quality.yml: a judged run a day,
# no `for`): such a number cannot flap between runs, and a hold only kept the alert of a run that a
# later, healthy run had replaced on /metrics (a bad history day's, 5 minutes past today's healthy
# run), as Prometheus holds it on the same file. They keep the shipped file's: none. (The trend
# rules on the runs average 3 days that slide point by point: those keep their hold.)
PER_RUN_GROUPS = frozenset({"quality"})


def demo_rules(directory: Path, cycle_keep_firing: str = CYCLE_KEEP_FIRING,
               cycle_for: Mapping[str, str] | None = None, shipped_window: frozenset[str] = frozenset()) -> list[Path]:
    """The shipped rule files as the demo loads them: the 1m window instead of 5m; the cycle's
    alerts with `for` at most 30 s, so a 90-s fault shows its alert and the alert resolves before
    the next one; hysteresis (`keep_firing_for`) on every alert but those of `PER_RUN_GROUPS`,
    `cycle_keep_firing` on the cycle's (the scorecard, one fault per run, holds them a whole
    window). `cycle_for` gives a cycle alert another `for` (the scorecard's, whose fault lasts until
    its alert fired); the alerts in `shipped_window` keep the shipped 5m window (the scorecard's,
    whose compressed 1m window holds too few requests for their cause)."""
    out = []
    directory.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED_RULE_FILES:
        data = yaml.safe_load(resolve(Path(f"alerts/{name}.yml")).read_text())
        for group in data.get("groups", []):
            for rule in group.get("rules", []):
                if "expr" in rule and rule.get("alert") not in shipped_window and 'window="5m"' in str(rule["expr"]):
                    rule["expr"] = str(rule["expr"]).replace('window="5m"', 'window="1m"')
                    _reword(rule, f"the last {spoken(300)}", f"the last {spoken(60, alone=True)}")
                if "alert" not in rule:
                    continue
                cycle = rule["alert"] in CYCLE_ALERTS
                shipped_for = str(rule.get("for", "0s"))
                if cycle and "for" in rule and Duration(str(rule["for"])).seconds > DEMO_FOR_S:
                    rule["for"] = f"{DEMO_FOR_S:g}s"
                if cycle and cycle_for and rule["alert"] in cycle_for:
                    rule["for"] = cycle_for[rule["alert"]]
                if str(rule.get("for", "0s")) != shipped_for:
                    _reword(rule, f"for {spoken(Duration(shipped_for).seconds)}",
                            f"for {spoken(Duration(str(rule['for'])).seconds)}")
                if group.get("name") not in PER_RUN_GROUPS:
                    rule.setdefault("keep_firing_for", cycle_keep_firing if cycle else KEEP_FIRING)
        path = directory / f"{name}.yml"
        path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        out.append(path)
    return out


def spoken(seconds: float, alone: bool = False) -> str:
    """A duration as the rules' words say it: 300 -> "5 minutes", 30 -> "30 seconds"; `alone`: one
    unit without its number ("the last minute")."""
    unit, count = "second", int(seconds)
    for name, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            unit, count = name, int(seconds // size)
            break
    if count == 1:
        return unit if alone else f"1 {unit}"
    return f"{count} {unit}s"


def _reword(rule: dict[str, Any], said: str, meant: str) -> None:
    """The rule's annotations with the duration they say changed to the one the demo gives it (the
    demo shortens windows and `for`: "over the last 5 minutes" on window=1m misleads)."""
    for key, text in (rule.get("annotations") or {}).items():
        rule["annotations"][key] = str(text).replace(said, meant)
