"""Simulated vLLM V1 engine core: requests in, tokens out on a latency model (a simulator).

`SimulatedEngine` draws each request's randomness at arrival, applies the fault schedule and
hands the timeline to the `Scheduler`. `step(now)` is pure with respect to time: it takes a
clock reading, delivers every token whose model time has passed and returns the step's
`IterationStats`. `start()` runs steps in the current event loop, sleeping until the next
token is due, so per-request CPU is a few arithmetic operations per step rather than one
wake-up per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import random
import time
from collections import deque
from collections.abc import Callable

from monitor.sim.faults import Fault, FaultEffects, FaultKind, FaultSchedule, combine_effects
from monitor.sim.profile import DEFAULT_MODEL, EngineConfig, LatencyProfile
from monitor.sim.request import RequestDraws, SimRequest
from monitor.sim.scheduler import Scheduler
from monitor.sim.stats import EngineSnapshot, IterationStats

__all__ = ["DEFAULT_MODEL", "EngineConfig", "LatencyProfile", "SimulatedEngine"]

_log = logging.getLogger(__name__)

Clock = Callable[[], float]
Observer = Callable[[IterationStats], None]


class SimulatedEngine:
    """The simulator's engine core. All randomness comes from one `random.Random`, seeded
    when `config.deterministic` is set; all times come from `clock`."""

    def __init__(
        self,
        config: EngineConfig | None = None,
        profile: LatencyProfile | None = None,
        faults: FaultSchedule | None = None,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self.config = config or EngineConfig()
        self.profile = profile or LatencyProfile()
        self.faults = faults or FaultSchedule()
        self.scheduler = Scheduler(self.config, self.profile)
        self._injected: tuple[Fault, ...] = ()
        self._clock = clock
        self._rng = random.Random(self.config.seed) if self.config.deterministic else random.Random()
        # The P/D transfers' draws apart from the requests' own, so a seeded run without a split is unchanged.
        self._pd_rng = random.Random(self.config.seed + 2) if self.config.deterministic else random.Random()
        self._ids = itertools.count()
        self._observers: list[Observer] = []
        self.started_at = clock()  # the fault schedule's time zero
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Future[None] | None = None

    @property
    def model_name(self) -> str:
        return self.config.model_name

    @property
    def waiting(self) -> deque[SimRequest]:
        return self.scheduler.waiting

    @property
    def running(self) -> list[SimRequest]:
        return self.scheduler.running

    def now(self) -> float:
        return self._clock()

    def add_observer(self, observer: Observer) -> None:
        """`observer(stats)` is called after every step that did something."""
        self._observers.append(observer)

    # ---- faults -------------------------------------------------------------------------

    def inject(self, kind: FaultKind, magnitude: float, duration_s: float = math.inf) -> Fault:
        """Start a fault now (tests, demo controls); it runs outside any schedule cycle."""
        fault = Fault(self.now() - self.started_at, duration_s, kind, magnitude)
        self._injected = (*self._injected, fault)
        return fault

    def clear_injected(self) -> None:
        self._injected = ()

    def effects(self, now: float) -> FaultEffects:
        elapsed = now - self.started_at
        injected = tuple(f for f in self._injected if f.active_at(elapsed))
        return combine_effects(self.faults.active(elapsed) + injected, elapsed)

    # ---- requests -----------------------------------------------------------------------

    def submit(self, prompt_tokens: int, max_tokens: int | None = None, n: int = 1,
               prefix_key: str | None = None) -> SimRequest:
        """Queue a request; raises ValueError for what vLLM rejects with 400. `prefix_key` names the
        session whose prefix it revisits (a host KV tier finds it by that)."""
        prompt_tokens = max(1, prompt_tokens)
        room = self.config.max_model_len - prompt_tokens
        if max_tokens is not None and max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if room < 1 or (max_tokens is not None and max_tokens > room):
            raise ValueError(
                f"This model's maximum context length is {self.config.max_model_len} tokens; "
                f"the request has {prompt_tokens} prompt tokens and asks for {max_tokens}."
            )
        now = self.now()
        draws = self._draw()
        request = SimRequest(
            request_id=str(next(self._ids)),
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens if max_tokens is not None else room,
            max_tokens_param=max_tokens,
            n=n,
            arrival=now,
            draws=draws,
            will_error=draws.error_roll < self.effects(now).error_fraction,
            prefix_key=prefix_key,
            pd_roll=self._pd_rng.random() if self.config.pd is not None else 1.0,
        )
        self.scheduler.waiting.append(request)
        self._kick()
        return request

    def _draw(self) -> RequestDraws:
        low, high = self.profile.output_tokens
        spread = self.profile.jitter
        return RequestDraws(
            output_tokens=self._rng.randint(low, high),
            prefill_jitter=self._rng.uniform(1 - spread, 1 + spread),
            per_token_jitter=self._rng.uniform(1 - spread, 1 + spread),
            error_roll=self._rng.random(),
        )

    def abort(self, request: SimRequest) -> None:
        """The client went away: drop the request wherever it is, counted as "abort"."""
        self._publish(self.scheduler.abort(request, self.now()))
        self._kick()

    def step(self, now: float) -> IterationStats:
        stats = self.scheduler.step(now, self.effects(now))
        self._publish(stats)
        return stats

    def snapshot(self, now: float | None = None) -> EngineSnapshot:
        return self.scheduler.snapshot(self.effects(self.now() if now is None else now))

    def _publish(self, stats: IterationStats) -> None:
        if stats.empty and not stats.num_preemptions:
            return
        for observer in self._observers:
            observer(stats)

    # ---- the loop -----------------------------------------------------------------------

    def start(self) -> None:
        """Run steps in the current event loop (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")
            self._task.add_done_callback(_report_crash)

    async def stop(self) -> None:
        """Stop stepping and abort whatever is still queued or running."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for request in [*self.running, *self.waiting]:
            self.abort(request)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = self.now()
            self.step(now)
            next_token = self.scheduler.next_event_time()
            delay = None if next_token is None else max(next_token - now, self.config.min_step_s)
            await self._sleep(loop, delay)

    async def _sleep(self, loop: asyncio.AbstractEventLoop, delay: float | None) -> None:
        """Sleep `delay` seconds (None: until kicked); a submit or abort kicks us early."""
        wake = self._wake = loop.create_future()
        timer = loop.call_later(delay, _resolve, wake) if delay is not None else None
        try:
            await wake
        finally:
            self._wake = None
            if timer is not None:
                timer.cancel()

    def _kick(self) -> None:
        if self._wake is not None:
            _resolve(self._wake)


def _report_crash(task: asyncio.Task[None]) -> None:
    # Without this a bug in a step would stop the engine silently and hang every client.
    if not task.cancelled() and task.exception() is not None:
        _log.error("simulated engine loop crashed", exc_info=task.exception())


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
