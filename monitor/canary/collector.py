"""The canary's job: start each probe on its own timetable, keep its last result and counts.

Probes are spread over their interval (probe i of n starts i/n of an interval after start-up)
and never overlap: a probe still running when its next slot comes skips that slot (counted).
The job itself only dispatches (it returns at once), so a hung endpoint never delays the
other probes or the other collectors; each probe is bounded by its own timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypedDict

from monitor.canary import CANARY_HEADER
from monitor.canary.outcome import OUTCOMES, Observed, Outcome, ProbeResult, judge, ttft_gap
from monitor.config import CanaryProbe, CanarySettings
from monitor.health import HealthBook
from monitor.redaction import safe_url
from monitor.service.view import ServiceView

log = logging.getLogger("monitor.canary")
COLLECTOR = "canary"


class ProbeRunner(Protocol):
    async def run(self) -> Observed: ...

    async def aclose(self) -> None: ...


ProberFactory = Callable[[CanaryProbe, str], ProbeRunner]


class ProbeStatus(TypedDict):
    """One probe in /api/v1/status: its settings (the key's variable by name, never its value) and
    its last outcome (None until it has run)."""

    name: str
    base_url: str
    model: str
    target: str | None
    interval_seconds: float
    timeout_seconds: float
    api_key_env: str | None
    expect: str | None
    up: bool | None
    last_probe: float | None
    outcome: Outcome | None
    detail: str | None
    http_status: int | None
    ttft_seconds: float | None
    tpot_seconds: float | None
    e2e_seconds: float | None
    output_tokens: int | None
    tokens_from: Literal["usage", "chunks"] | None
    ttft_gap_seconds: float | None
    consecutive_failures: int
    probes: dict[str, int]  # outcome -> how many, since start
    skipped_slots: int


class CanaryStatus(TypedDict):
    user: str
    header: str
    probes: list[ProbeStatus]


def sdk_prober(probe: CanaryProbe, user: str) -> ProbeRunner:
    # Imported here: the openai SDK is slow to import and large (docs/performance.md), paid only by
    # a monitor with probes.
    from monitor.canary.probe import Prober

    return Prober(probe, user)


@dataclass
class ProbeState:
    probe: CanaryProbe
    runner: ProbeRunner
    offset_s: float  # where in the interval this probe's slots lie
    expect: re.Pattern[str] | None
    due: float | None = None  # monotonic time of the next slot
    task: asyncio.Task[ProbeResult | None] | None = None
    last: ProbeResult | None = None
    last_at: float | None = None  # wall-clock end of the last probe
    consecutive_failures: int = 0
    counts: Counter[Outcome] = field(default_factory=Counter)
    skipped: int = 0  # slots skipped because the previous probe was still running


class CanaryCollector:
    def __init__(
        self,
        settings: CanarySettings,
        health: HealthBook,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        make_runner: ProberFactory = sdk_prober,
        service_view: Callable[[], ServiceView | None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.service_view = service_view
        self.health = health
        self.wall = wall
        self.clock = clock
        count = len(settings.probes)
        self.probes = {
            p.name: ProbeState(p, make_runner(p, settings.user), p.interval.seconds * i / count,
                               re.compile(p.expect) if p.expect is not None else None)
            for i, p in enumerate(settings.probes)
        }
        shortest = min((p.interval.seconds for p in settings.probes), default=60.0)
        # How often the job looks for due probes: a slot starts at most this late.
        self.tick_seconds = min(1.0, shortest / 10)

    async def dispatch(self) -> None:
        """Start every probe whose slot has come (the scheduler calls this every tick)."""
        now = self.clock()
        for state in self.probes.values():
            if state.due is None:
                state.due = now + state.offset_s
            if now < state.due:
                continue
            interval = state.probe.interval.seconds
            missed = int((now - state.due) // interval)  # slots that passed while the loop was busy
            state.due += (missed + 1) * interval
            if state.task is not None and not state.task.done():
                state.skipped += 1
                continue
            state.task = asyncio.create_task(self.probe_once(state.probe.name), name=f"canary:{state.probe.name}")

    async def probe_once(self, name: str) -> ProbeResult | None:
        """Run one probe now and record it (None if the prober itself broke: logged, a metric)."""
        state = self.probes[name]
        with self.health.run(COLLECTOR, name):
            result = judge(await state.runner.run(), state.expect)
            self._record(state, result)
            return result
        return None

    async def probe_all(self) -> dict[str, ProbeResult | None]:
        """Every probe once, one after another (`infermon check`); one already running is awaited, not doubled."""
        results: dict[str, ProbeResult | None] = {}
        for name, state in self.probes.items():
            running = state.task is not None and not state.task.done()
            results[name] = await state.task if running and state.task is not None else await self.probe_once(name)
        return results

    def _record(self, state: ProbeState, result: ProbeResult) -> None:
        previous = state.last
        state.last, state.last_at = result, self.wall()
        state.counts[result.outcome] += 1
        name = state.probe.name
        if result.ok:
            if state.consecutive_failures:
                log.info("canary %s is ok again after %d failed probes", name, state.consecutive_failures)
            state.consecutive_failures = 0
            return
        state.consecutive_failures += 1
        # One line when a failure starts or changes, not one per probe of a long outage.
        repeated = previous is not None and previous.outcome == result.outcome
        log.log(logging.DEBUG if repeated else logging.WARNING, "canary %s failed: %s (%s) [%s]",
                name, result.outcome, result.detail, safe_url(state.probe.base_url))

    def gap(self, state: ProbeState) -> float | None:
        """The last probe's TTFT minus its target's P50 TTFT over the gap window (None if either is missing)."""
        view = self.service_view()
        if state.probe.target is None or state.last is None or view is None:
            return None
        return ttft_gap(state.last.ttft_seconds, engine_p50_ttft(view, state.probe.target, state.probe.model,
                                                                 self.gap_window(view)))

    def gap_window(self, view: ServiceView) -> str:
        if self.settings.gap_window is not None:
            return self.settings.gap_window.text
        return min(view.windows, key=lambda w: w.seconds).label

    def status(self) -> CanaryStatus:
        return {
            "user": self.settings.user,
            "header": CANARY_HEADER,
            "probes": [self._probe_status(state) for state in self.probes.values()],
        }

    def _probe_status(self, state: ProbeState) -> ProbeStatus:
        probe, last = state.probe, state.last
        return {
            "name": probe.name,
            "base_url": safe_url(probe.base_url),
            "model": probe.model,
            "target": probe.target,
            "interval_seconds": probe.interval.seconds,
            "timeout_seconds": probe.timeout.seconds,
            "api_key_env": probe.api_key_env,  # the variable's name, never its value
            "expect": probe.expect,
            "up": None if last is None else last.ok,
            "last_probe": state.last_at,
            "outcome": None if last is None else last.outcome,
            "detail": None if last is None else last.detail,
            "http_status": None if last is None else last.status,
            "ttft_seconds": None if last is None else last.ttft_seconds,
            "tpot_seconds": None if last is None else last.tpot_seconds,
            "e2e_seconds": None if last is None else last.e2e_seconds,
            "output_tokens": None if last is None else last.output_tokens,
            "tokens_from": None if last is None else last.tokens_from,
            "ttft_gap_seconds": self.gap(state),
            "consecutive_failures": state.consecutive_failures,
            "probes": {outcome: state.counts[outcome] for outcome in OUTCOMES if state.counts[outcome]},
            "skipped_slots": state.skipped,
        }

    async def aclose(self) -> None:
        tasks = [s.task for s in self.probes.values() if s.task is not None and not s.task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for state in self.probes.values():
            await state.runner.aclose()


def engine_p50_ttft(view: ServiceView, target: str, model: str, window: str) -> float | None:
    """The engine's own P50 TTFT (histogram_quantile over its buckets) for one target and model."""
    target_view = view.targets.get(target)
    if target_view is None or not target_view.up:
        return None
    stats = target_view.stats.get((model, window))
    return None if stats is None else stats.quantiles.get("ttft", {}).get(0.5)
