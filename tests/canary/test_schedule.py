"""The canary's timetable, on an injected clock: probes spread over the interval, one at a time each."""

from __future__ import annotations

import asyncio

from monitor.canary.collector import CanaryCollector
from monitor.canary.outcome import Observed
from monitor.config import CanaryProbe, load_settings
from monitor.health import HealthBook


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class HeldProbe:
    """A probe that answers only when the test releases it; counts how many ran at once."""

    def __init__(self, probe: CanaryProbe, user: str) -> None:
        self.name = probe.name
        self.release = asyncio.Event()
        self.started = 0
        self.running = 0
        self.most_at_once = 0

    async def run(self) -> Observed:
        self.started += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        return Observed(status=200, first_content_s=0.1, last_content_s=0.2, ended_s=0.2, content_chunks=2,
                        text="hi there", finish_reason="stop")

    async def aclose(self) -> None:
        pass


def make(names: list[str], interval: str = "60s") -> tuple[CanaryCollector, Clock, dict[str, HeldProbe]]:
    settings = load_settings(None, {"canary": {"probes": [
        {"name": n, "base_url": "http://127.0.0.1:9/v1", "model": "m", "interval": interval, "timeout": "10s"}
        for n in names]}})
    clock = Clock()
    runners: dict[str, HeldProbe] = {}

    def factory(probe: CanaryProbe, user: str) -> HeldProbe:
        runners[probe.name] = HeldProbe(probe, user)
        return runners[probe.name]

    return CanaryCollector(settings.canary, HealthBook(), clock=clock, make_runner=factory), clock, runners


def test_probes_are_spread_over_the_interval() -> None:
    canary, clock, runners = make(["a", "b", "c", "d"])

    async def run() -> list[dict[str, int]]:
        seen = []
        for step in range(0, 121, 5):  # two intervals, ticking every 5 s
            clock.now = 1000.0 + step
            await canary.dispatch()
            await asyncio.sleep(0)
            for runner in runners.values():
                runner.release.set()  # each answers at once
            await asyncio.sleep(0)
            seen.append({n: r.started for n, r in runners.items()})
            for runner in runners.values():
                runner.release.clear()
        await canary.aclose()
        return seen

    seen = asyncio.run(run())
    starts = {name: [i * 5 for i, counts in enumerate(seen) if counts[name] > (seen[i - 1][name] if i else 0)]
              for name in "abcd"}
    # a at 0 s, b a quarter of the interval later, ... each again one interval later.
    assert starts == {"a": [0, 60, 120], "b": [15, 75], "c": [30, 90], "d": [45, 105]}
    assert canary.tick_seconds == 1.0


def test_a_probe_never_overlaps_itself() -> None:
    canary, clock, runners = make(["slow"], interval="10s")

    async def run() -> None:
        for step in range(0, 35):  # the probe hangs for 3.5 intervals
            clock.now = 1000.0 + step
            await canary.dispatch()
            await asyncio.sleep(0)
        runners["slow"].release.set()
        await asyncio.sleep(0.01)
        clock.now = 1040.0
        await canary.dispatch()
        await asyncio.sleep(0.01)
        await canary.aclose()

    asyncio.run(run())
    runner = runners["slow"]
    assert runner.most_at_once == 1
    assert runner.started == 2  # once at 0 s, then at 40 s once the first had finished
    state = canary.probes["slow"]
    assert state.skipped == 3  # the slots at 10, 20 and 30 s
    assert state.counts["ok"] == 2
    assert canary.status()["probes"][0]["skipped_slots"] == 3  # type: ignore[index]


def test_a_late_tick_skips_the_missed_slots_rather_than_bursting() -> None:
    canary, clock, runners = make(["p"], interval="10s")

    async def run() -> None:
        await canary.dispatch()  # slot 0
        runners["p"].release.set()
        await asyncio.sleep(0)
        clock.now += 95  # the loop was stuck for 9.5 intervals
        await canary.dispatch()
        await canary.dispatch()
        await asyncio.sleep(0)
        await canary.aclose()

    asyncio.run(run())
    assert runners["p"].started == 2
    assert canary.probes["p"].due == 1100.0  # back on its own timetable


class BrokenProbe(HeldProbe):
    async def run(self) -> Observed:
        raise RuntimeError("a bug in the prober")


def test_a_broken_prober_is_the_canarys_own_failure() -> None:
    settings = load_settings(None, {"canary": {"probes": [{"name": "p", "base_url": "http://127.0.0.1:9/v1",
                                                           "model": "m"}]}})
    health = HealthBook()
    canary = CanaryCollector(settings.canary, health, make_runner=BrokenProbe)

    async def run() -> object:
        result = await canary.probe_once("p")
        await canary.aclose()
        return result

    assert asyncio.run(run()) is None
    entry = health.get("canary", "p")
    assert entry.success is False and entry.error == "RuntimeError: a bug in the prober"
    assert canary.probes["p"].last is None  # no probe result: no up, no numbers
