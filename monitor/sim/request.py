"""One request inside the vLLM V1 simulator: its draws, its timeline and its waiters.

Token k of a running segment is produced at a time computed from the model, not from the
wall clock, so the latency distribution stays exactly the profile's even when the event
loop is late; the engine merely *delivers* due tokens when it wakes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from monitor.sim.stats import FinishedRequestStats, FinishReason


@dataclass(frozen=True)
class RequestDraws:
    """Every random draw a request needs, taken at arrival in a fixed order so a seeded
    run is reproducible whatever faults or timings happen later."""

    output_tokens: int
    prefill_jitter: float
    per_token_jitter: float
    error_roll: float


@dataclass(eq=False)
class SimRequest:
    request_id: str
    prompt_tokens: int
    max_tokens: int  # effective cap (the param, else what the context window leaves)
    max_tokens_param: int | None
    n: int
    arrival: float
    draws: RequestDraws
    will_error: bool
    target_tokens: int = 0
    cached_tokens: int = 0
    prefix_key: str | None = None  # the session it belongs to (monitor.sim.tiers.prefix_key)
    loaded_tokens: int = 0  # prompt tokens loaded back from the host tier, not recomputed
    pd_roll: float = 1.0  # drawn apart from `draws` (only with a P/D split): below the failure share, fails
    first_scheduled: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: FinishReason | None = None
    emitted: int = 0
    num_preemptions: int = 0
    # Current running segment (reset by preemption): tokens seg_base+1.. are produced at
    # seg_first, seg_first + seg_per_token, ...
    seg_base: int = 0
    seg_first: float = 0.0
    seg_per_token: float = 0.0
    _progress: asyncio.Future[None] | None = field(default=None, repr=False)
    _done: asyncio.Future[None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.target_tokens = max(1, min(self.draws.output_tokens, self.max_tokens))

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def natural_finish_reason(self) -> FinishReason:
        return "length" if self.draws.output_tokens >= self.max_tokens else "stop"

    def start_segment(self, first_token_at: float, per_token_s: float) -> None:
        self.seg_base = self.emitted
        self.seg_first = first_token_at
        self.seg_per_token = per_token_s

    def token_time(self, k: int) -> float:
        """Model time of token k (1-based), for k in the current segment."""
        return self.seg_first + (k - self.seg_base - 1) * self.seg_per_token

    def due_tokens(self, now: float) -> int:
        if now < self.seg_first:
            return self.emitted
        if self.seg_per_token <= 0:
            return self.target_tokens
        # The epsilon makes "now == token_time(k)" deliver token k despite float rounding.
        steps = int((now - self.seg_first) / self.seg_per_token + 1e-9)
        return min(self.seg_base + 1 + steps, self.target_tokens)

    def next_token_time(self) -> float:
        return self.token_time(self.emitted + 1)

    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.emitted

    def finish_stats(self) -> FinishedRequestStats:
        assert self.finish_reason is not None and self.finished_at is not None
        scheduled = self.first_scheduled if self.first_scheduled is not None else self.finished_at
        first = self.first_token_at if self.first_token_at is not None else self.finished_at
        last = self.last_token_at if self.last_token_at is not None else first
        return FinishedRequestStats(
            finish_reason=self.finish_reason,
            e2e_latency=self.finished_at - self.arrival,
            queued_time=scheduled - self.arrival,
            prefill_time=first - scheduled,
            decode_time=last - first,
            inference_time=last - scheduled,
            num_prompt_tokens=self.prompt_tokens,
            num_generation_tokens=self.emitted,
            num_cached_tokens=self.cached_tokens,
            max_tokens_param=self.max_tokens_param,
            n_param=self.n,
            num_preemptions=self.num_preemptions,
        )

    # Waiting side: one consumer (the HTTP handler) per request. Futures are created by
    # the waiter inside the running loop, so the engine never needs to know the loop.

    def notify_progress(self) -> None:
        if self._progress is not None and not self._progress.done():
            self._progress.set_result(None)

    def notify_done(self) -> None:
        self.notify_progress()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    async def wait_progress(self) -> None:
        """Return after new tokens were delivered or the request finished."""
        if self.finished:
            return
        self._progress = asyncio.get_running_loop().create_future()
        try:
            await self._progress
        finally:
            self._progress = None

    async def wait_first_event(self) -> None:
        """Return once the first token exists or the request finished (e.g. error)."""
        while self.emitted == 0 and not self.finished:
            await self.wait_progress()

    async def wait_finished(self) -> None:
        if self.finished:
            return
        self._done = asyncio.get_running_loop().create_future()
        try:
            await self._done
        finally:
            self._done = None
