"""What the demo's fault cycle drives besides the simulated engine: the load generator's rate
(`traffic_dip`) and where the replayed H200 recording plays (`gpu_hold`), both read from the
same schedule at the same instant as the engine's own faults, so each alert of the cycle comes
with the GPU and traffic it is meant to show (see `faults.demo_schedule`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from monitor.alerting.rules import resolve
from monitor.config import SHIPPED_RULE_FILES, Duration
from monitor.sim.engine import SimulatedEngine
from monitor.sim.load import LoadConfig, run_load

LOAD_SLICE_S = 15.0  # the load runs in slices this long, each at the rate the schedule says


class HeldReplayClock:
    """The clock of a replayed recording: plays on as recorded, except that while a `gpu_hold`
    is active it reads as `hold` seconds into the current loop of the recording."""

    def __init__(self, sim: SimulatedEngine, period_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.sim, self.period_s, self.clock = sim, period_s, clock
        self.origin: float | None = None

    def __call__(self) -> float:
        now = self.clock()
        if self.origin is None:  # the replay's nvmlInit: playback starts here
            self.origin = now
            return now
        hold = self.sim.effects(self.sim.now()).gpu_hold_s
        if hold is None:
            return now
        loops = (now - self.origin) // self.period_s
        return self.origin + loops * self.period_s + hold % self.period_s


async def scheduled_load(sim_url: str, sim: SimulatedEngine, base: LoadConfig) -> None:
    """`base` for its whole duration, in slices whose rate follows `traffic_dip`; a slice starts
    while the previous one still drains, so the traffic has no gaps."""
    running: set[asyncio.Task[object]] = set()
    deadline = time.monotonic() + base.duration_s
    try:
        while time.monotonic() < deadline:
            rps = base.rps * sim.effects(sim.now()).traffic_mult
            piece = dataclasses.replace(base, rps=rps, duration_s=LOAD_SLICE_S, seed=None)
            task: asyncio.Task[object] = asyncio.create_task(run_load(sim_url, piece))
            running.add(task)
            task.add_done_callback(running.discard)
            await asyncio.sleep(LOAD_SLICE_S)
    finally:
        for task in list(running):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


DEMO_FOR_S = 30.0  # the demo's 90-s faults must outlast `for`


def demo_rules(directory: Path) -> list[Path]:
    """The shipped rule files as the demo loads them: the 1m window instead of 5m and `for` at
    most 30 s, so a 90-s fault shows its alert and the alert resolves before the next one."""
    out = []
    for name in SHIPPED_RULE_FILES:
        data = yaml.safe_load(resolve(Path(f"alerts/{name}.yml")).read_text())
        for group in data.get("groups", []):
            for rule in group.get("rules", []):
                if "expr" in rule:
                    rule["expr"] = str(rule["expr"]).replace('window="5m"', 'window="1m"')
                if "for" in rule and Duration(str(rule["for"])).seconds > DEMO_FOR_S:
                    rule["for"] = f"{DEMO_FOR_S:g}s"
        path = directory / f"{name}.yml"
        path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        out.append(path)
    return out
