"""The load: streamed chat completions at a fixed concurrency (closed loop) or a Poisson rate.

Every request goes through a `Sender`: the bench's own streaming client (`stream.py`, the
default: the wire's client, monitor/wire/, each chunk read as it arrives, at the CPU cost of `vllm bench
serve`'s) or the canary's `observe_stream` (the openai SDK: `--client openai`). Both record on the
canary's `Recording` (streaming, usage asked for, timed on the client's clock), so the bench and
the canary measure the same way.
Requests are taken in order from the drawn list, cycling: the warm-up takes the first ones,
each measured window the next, so two runs with the same seed send the same prompts.

A window sends new requests for `duration_s`, then waits for those in flight (each bounded by
the request timeout); its wall time runs from the first send to the last answer.

Each request is bounded in time and bytes: `timeout_s` is its whole deadline (connect to last
token, not per read), and its answer is capped (`bounded.py`): past the cap it is ended and
counted as `too_large`, with the reason.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import httpx
import openai

from monitor.canary.outcome import Observed, judge
from monitor.canary.probe import observe_stream
from monitor.loadtest.bounded import BoundedTransport, Caps, counting, response_limit
from monitor.loadtest.data import Request
from monitor.loadtest.stats import Sample
from monitor.loadtest.stream import StreamClient, proxied

BENCH_HEADER = "X-Infermon-Bench"  # marks the load so operators can leave it out of usage reports
TOO_LARGE = "too_large"  # the bench's own outcome, beside the canary's: an answer ended at its cap

# phase ("warmup" | "measure"), level label, share of the phase done (0..1), requests finished so far
Progress = Callable[[str, str, float, int], None]


@dataclass(frozen=True)
class Level:
    kind: Literal["concurrency", "rate"]
    value: float

    @property
    def label(self) -> str:
        return f"c={self.value:g}" if self.kind == "concurrency" else f"{self.value:g} req/s"


def parse_levels(concurrency: str | None, rate: str | None, default: Sequence[int]) -> list[Level]:
    """`--concurrency 1,8,32` or `--rate 10,20`; a sweep between bounds: `1:64` doubles from 1 to 64,
    `1:64:5` takes 5 levels spaced evenly on a log scale; neither: the scenario's concurrency levels."""
    if concurrency and rate:
        raise ValueError("give --concurrency or --rate, not both")
    if rate:
        try:
            values = _sweep(rate, whole=False) if ":" in rate else [float(v) for v in rate.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values or any(v <= 0 for v in values):
            raise ValueError(f"--rate {rate!r}: positive requests per second, comma-separated, or low:high[:levels]")
        return [Level("rate", v) for v in values]
    try:
        if concurrency and ":" in concurrency:
            levels = [int(v) for v in _sweep(concurrency, whole=True)]
        else:
            levels = [int(v) for v in concurrency.split(",") if v.strip()] if concurrency else list(default)
    except ValueError:
        levels = []
    if not levels or any(c < 1 for c in levels):
        raise ValueError(f"--concurrency {concurrency!r}: positive integers, comma-separated, or low:high[:levels]")
    return [Level("concurrency", c) for c in levels]


def _sweep(text: str, whole: bool) -> list[float]:
    """"low:high" -> low, 2 low, 4 low, ... high; "low:high:n" -> n levels, log-spaced (rounded and
    distinct when `whole`)."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(text)
    low, high = float(parts[0]), float(parts[1])
    if not 0 < low <= high:
        raise ValueError(text)
    if len(parts) == 2:
        values = [low]
        while values[-1] * 2 < high:
            values.append(values[-1] * 2)
        values.append(high)
    else:
        count = int(parts[2])
        if count < 2:
            raise ValueError(text)
        values = [float(f"{low * (high / low) ** (i / (count - 1)):.3g}") for i in range(count)]
    if whole:
        values = [float(v) for v in dict.fromkeys(round(v) for v in values)]
    return list(dict.fromkeys(values))


class LoadRunner:
    def __init__(
        self, sender: Sender, model: str, requests: Sequence[Request], *, seed: int = 0,
        progress: Progress | None = None, clock: Callable[[], float] = time.perf_counter,
        max_response_bytes: int | None = None,
    ) -> None:  # fmt: skip
        if not requests:
            raise ValueError("no requests to send")
        self.sender, self.model, self.requests, self.clock = sender, model, requests, clock
        self.max_response_bytes = max_response_bytes  # None: by each request's max_tokens
        self.progress = progress or (lambda phase, label, done, finished: None)
        self._rng = random.Random(seed)
        self._next = 0

    def _take(self) -> Request:
        request = self.requests[self._next % len(self.requests)]
        self._next += 1
        return request

    async def warmup(self, count: int, level: Level) -> list[Sample]:
        """`count` requests at the first level's load, thrown away by the caller."""
        if count <= 0:
            return []
        self.progress("warmup", level.label, 0.0, 0)
        concurrency = int(level.value) if level.kind == "concurrency" else max(1, min(count, 8))
        samples: list[Sample] = []
        started = self.clock()

        issued = 0

        async def worker() -> None:
            nonlocal issued
            while issued < count:
                issued += 1
                samples.append(await self._one(started))
                self.progress("warmup", level.label, len(samples) / count, len(samples))

        await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
        return samples

    async def measure(self, level: Level, duration_s: float) -> tuple[list[Sample], float]:
        """The samples of one window and its wall time."""
        self.progress("measure", level.label, 0.0, 0)
        started = self.clock()
        deadline = started + duration_s
        samples: list[Sample] = []

        def record(sample: Sample) -> None:
            samples.append(sample)
            self.progress("measure", level.label, min(1.0, (self.clock() - started) / duration_s), len(samples))

        if level.kind == "concurrency":
            await self._closed_loop(int(level.value), started, deadline, record)
        else:
            await self._poisson(level.value, started, deadline, record)
        ended = max((s.sent_s + (s.e2e_s or 0.0) for s in samples), default=self.clock() - started)
        return samples, max(ended, 1e-9)

    async def _closed_loop(self, concurrency: int, started: float, deadline: float,
                           record: Callable[[Sample], None]) -> None:
        async def user() -> None:
            while self.clock() < deadline:
                record(await self._one(started))

        await asyncio.gather(*(user() for _ in range(concurrency)))

    async def _poisson(self, rate: float, started: float, deadline: float, record: Callable[[Sample], None]) -> None:
        in_flight: set[asyncio.Task[None]] = set()

        async def one() -> None:
            record(await self._one(started))

        arrival = started
        while True:
            arrival += self._rng.expovariate(rate)
            if arrival >= deadline:
                break
            await asyncio.sleep(max(0.0, arrival - self.clock()))
            task = asyncio.create_task(one())
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        await asyncio.gather(*list(in_flight))

    async def _one(self, window_start: float) -> Sample:
        request = self._take()
        body = {"model": self.model, "messages": list(request.messages), "max_tokens": request.max_tokens}
        sent = self.clock() - window_start
        seen, too_large = await self.sender.observe(body, response_limit(request.max_tokens, self.max_response_bytes))
        result = judge(seen)
        outcome: str = result.outcome
        detail = "" if result.ok else result.detail
        if too_large is not None:  # the client saw only an error it could not read: say which
            outcome, detail = TOO_LARGE, too_large
        return Sample(sent_s=sent, ok=outcome == "ok", outcome=outcome, ttft_s=result.ttft_seconds,
                      tpot_s=result.tpot_seconds, e2e_s=result.e2e_seconds, output_tokens=result.output_tokens,
                      prompt_tokens=seen.usage_prompt_tokens if result.ok else None, detail=detail,
                      held_s=self.clock() - window_start - sent, tokens_from=result.tokens_from)


def _drop_text(text: str) -> str:
    # The answers are not kept (a long run would hold them all); a failure's reason is short.
    return text[:200]


# The SDK's own pool size (openai's DEFAULT_CONNECTION_LIMITS), kept with a transport of ours.
_POOL = httpx.Limits(max_connections=1000, max_keepalive_connections=100)


def make_client(base_url: str, api_key: str | None, timeout_s: float, caps: Caps | None = None) -> openai.AsyncOpenAI:
    """The openai SDK, as the canary uses it, on an httpx client whose transport caps every answer
    (`bounded.py`). The openai SDK takes an `httpx.AsyncClient` from 1.x on (3.x, on
    httpx2, still accepts one)."""
    http = httpx.AsyncClient(transport=BoundedTransport(httpx.AsyncHTTPTransport(limits=_POOL), caps or Caps()),
                             timeout=timeout_s, follow_redirects=True)
    # cast: 3.x types the argument as an httpx2 client, and takes an httpx one as well
    return openai.AsyncOpenAI(api_key=api_key or "EMPTY", base_url=base_url, max_retries=0, timeout=timeout_s,
                           default_headers={BENCH_HEADER: "1"}, http_client=cast(Any, http))


class Sender(Protocol):
    """Sends one streamed chat completion and times it: -> what it saw, and the reason its answer
    was ended at a cap (or None)."""

    name: str

    async def observe(self, body: dict[str, Any], limit: int | None) -> tuple[Observed, str | None]: ...

    async def close(self) -> None: ...


class SdkSender:
    """The openai SDK through the canary's `observe_stream`."""

    name = "openai"

    def __init__(self, client: openai.AsyncOpenAI, timeout_s: float, extra_body: dict[str, Any] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.client, self.timeout_s, self.extra_body, self.clock = client, timeout_s, extra_body or {}, clock

    async def observe(self, body: dict[str, Any], limit: int | None) -> tuple[Observed, str | None]:
        if self.extra_body:
            body = {**body, "extra_body": self.extra_body}
        with counting(limit) as kept:
            seen = await observe_stream(self.client, body, self.timeout_s, self.clock, _drop_text)
        return seen, kept.too_large

    async def close(self) -> None:
        await self.client.close()


class StreamSender:
    """The bench's own client (stream.py)."""

    name = "stream"

    def __init__(self, client: StreamClient, extra_body: dict[str, Any] | None = None) -> None:
        self.client, self.extra_body = client, extra_body or {}

    async def observe(self, body: dict[str, Any], limit: int | None) -> tuple[Observed, str | None]:
        return await self.client.observe({**body, **self.extra_body} if self.extra_body else body, limit)

    async def close(self) -> None:
        await self.client.close()


CLIENTS = ("stream", "openai")


def make_sender(kind: str, base_url: str, api_key: str | None, timeout_s: float, caps: Caps | None = None,
                extra_body: dict[str, Any] | None = None,
                clock: Callable[[], float] = time.perf_counter) -> tuple[Sender, str | None]:
    """`kind` "stream" (the bench's own client) or "openai" (the SDK); -> the sender and, when the
    SDK was taken in place of the stream client, why (a proxy the environment sets for the target:
    the SDK's httpx speaks it, stream.py does not)."""
    if kind not in CLIENTS:
        raise ValueError(f"the client is one of {', '.join(CLIENTS)}, not {kind!r}")
    proxy = proxied(base_url) if kind == "stream" else None
    if kind == "stream" and proxy is None:
        return StreamSender(StreamClient(base_url, api_key, timeout_s, caps, {BENCH_HEADER: "1"}, clock),
                            extra_body), None
    why = f"{proxy} is set for the target: the openai SDK's client speaks the proxy" if proxy else None
    return SdkSender(make_client(base_url, api_key, timeout_s, caps), timeout_s, extra_body, clock), why
