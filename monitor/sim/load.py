"""Open-loop load generator for the vLLM V1 simulator (or any OpenAI-compatible server).

Requests start on a fixed timetable (evenly spaced or Poisson) whatever the server does, as
real users arrive, so a slow server shows up as latency and queueing rather than as a lower
offered load. It only ever talks to the base URL it is given, and it always stops: no new
request after `duration_s`, and in-flight ones are cancelled after `drain_timeout_s`.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from monitor.aio import finish

MAX_SAMPLES = 100_000


@dataclass(frozen=True)
class LoadConfig:
    rps: float = 5.0
    duration_s: float = 10.0
    max_concurrency: int = 64  # arrivals beyond it are skipped, not queued (open loop)
    arrival: Literal["uniform", "poisson"] = "uniform"
    stream_share: float = 0.5  # fraction of requests sent with stream=true
    prompt_words: tuple[int, int] = (20, 200)
    max_tokens: tuple[int, int] | None = (64, 512)  # None: let the server decide
    endpoint: Literal["chat", "completions"] = "chat"
    model: str | None = None
    seed: int | None = 0
    request_timeout_s: float = 60.0
    drain_timeout_s: float = 30.0


@dataclass
class LoadSummary:
    sent: int = 0
    ok: int = 0
    errors: int = 0  # HTTP >= 400 or transport failure
    skipped: int = 0  # arrivals dropped because max_concurrency requests were in flight
    cancelled: int = 0  # still running when the drain timeout hit
    status_counts: dict[int, int] = field(default_factory=dict)  # 0 = no HTTP answer
    # End to end (successful only) and first-content times (streamed only): the newest
    # MAX_SAMPLES each, so a week-long demo load does not grow without bound.
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    ttfts_s: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_SAMPLES))
    prompt_tokens: int = 0
    completion_tokens: int = 0
    elapsed_s: float = 0.0

    def latency_quantile(self, q: float) -> float:
        return quantile(self.latencies_s, q)


def quantile(values: Iterable[float], q: float) -> float:
    """Nearest-rank quantile; NaN when there is nothing to rank."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def arrival_offsets(config: LoadConfig, rng: random.Random) -> Iterator[float]:
    """Seconds after the start at which each request is sent, all < duration_s."""
    if config.arrival == "uniform":
        # i / rps rather than a running sum, so float drift cannot add a request at the end.
        count = math.ceil(config.duration_s * config.rps - 1e-9)
        yield from (i / config.rps for i in range(count))
        return
    offset = rng.expovariate(config.rps)
    while offset < config.duration_s:
        yield offset
        offset += rng.expovariate(config.rps)


def build_payload(config: LoadConfig, rng: random.Random) -> dict[str, Any]:
    prompt = " ".join(["word"] * rng.randint(*config.prompt_words))
    payload: dict[str, Any] = (
        {"messages": [{"role": "user", "content": prompt}]}
        if config.endpoint == "chat" else {"prompt": prompt}
    )  # fmt: skip
    if config.model:
        payload["model"] = config.model
    if config.max_tokens is not None:
        payload["max_tokens"] = rng.randint(*config.max_tokens)
    if rng.random() < config.stream_share:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    return payload


async def run_load(base_url: str, config: LoadConfig | None = None,
                   clock: Callable[[], float] | None = None) -> LoadSummary:
    """The load of `config`, each request sent at its offset on `clock` (seconds; the event loop's
    clock by default). A clock that runs slower than real time, or stands still (the scorecard's
    world while the monitor works), holds the timetable back with it: the load keeps the world's
    time, not the host's."""
    config = config or LoadConfig()
    if config.rps <= 0 or config.duration_s < 0:
        raise ValueError("rps must be > 0 and duration_s >= 0")
    rng = random.Random(config.seed)
    summary = LoadSummary()
    limits = httpx.Limits(max_connections=config.max_concurrency,
                          max_keepalive_connections=config.max_concurrency)  # fmt: skip
    path = "/v1/chat/completions" if config.endpoint == "chat" else "/v1/completions"
    loop = asyncio.get_running_loop()
    now = clock or loop.time
    start = now()
    in_flight: set[asyncio.Task[None]] = set()
    client = httpx.AsyncClient(base_url=base_url, timeout=config.request_timeout_s, limits=limits)
    try:
        try:
            for offset in arrival_offsets(config, rng):
                await sleep_until(now, start + offset)
                payload = build_payload(config, rng)  # drawn even when skipped: stable sequence
                if len(in_flight) >= config.max_concurrency:
                    summary.skipped += 1
                    continue
                task = asyncio.create_task(_send(client, path, payload, summary))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
            await _drain(in_flight, config.drain_timeout_s, summary)
        except asyncio.CancelledError:
            # Stopped from outside (a test switching loads, the demo's slices), while sending or
            # while waiting for the last answers: end the requests in flight before the client
            # closes. Left running, they finish on a closed pool, which never closes their
            # connections: unclosed sockets that a later test's GC reports. A second cancel
            # must not cut this short either.
            await finish(_drain(in_flight, 0.0, summary))
            raise
    finally:
        # A slice is often cancelled just as it closes (the demo's and the scorecard's loads stop
        # their slices wherever they are): the close must still reach every connection.
        await finish(client.aclose())
    summary.elapsed_s = now() - start
    return summary


async def sleep_until(clock: Callable[[], float], at: float) -> None:
    """Return once `clock()` reached `at` (at once when it has). A clock no faster than real time
    needs one sleep; a paused one is looked at again after each."""
    await asyncio.sleep(0)
    while (wait := at - clock()) > 0:
        await asyncio.sleep(wait)


async def _drain(tasks: set[asyncio.Task[None]], timeout_s: float, summary: LoadSummary) -> None:
    if not tasks:
        return
    _, pending = await asyncio.wait(set(tasks), timeout=timeout_s) if timeout_s > 0 else (set(), set(tasks))
    for task in pending:
        task.cancel()
    summary.cancelled += len(pending)
    await asyncio.gather(*pending, return_exceptions=True)


async def _send(
    client: httpx.AsyncClient, path: str, payload: dict[str, Any], summary: LoadSummary
) -> None:
    summary.sent += 1
    started = asyncio.get_running_loop().time()
    try:
        if payload.get("stream"):
            status, usage = await _send_streaming(client, path, payload, summary, started)
        else:
            status, usage = await _send_plain(client, path, payload)
    except httpx.HTTPError:
        status, usage = 0, None
    summary.status_counts[status] = summary.status_counts.get(status, 0) + 1
    if status != 200:
        summary.errors += 1
        return
    summary.ok += 1
    summary.latencies_s.append(asyncio.get_running_loop().time() - started)
    if usage:
        summary.prompt_tokens += int(usage.get("prompt_tokens", 0))
        summary.completion_tokens += int(usage.get("completion_tokens", 0))


async def _send_plain(
    client: httpx.AsyncClient, path: str, payload: dict[str, Any]
) -> tuple[int, dict[str, Any] | None]:
    response = await client.post(path, json=payload)
    usage = response.json().get("usage") if response.status_code == 200 else None
    return response.status_code, usage


async def _send_streaming(
    client: httpx.AsyncClient, path: str, payload: dict[str, Any], summary: LoadSummary,
    started: float,
) -> tuple[int, dict[str, Any] | None]:  # fmt: skip
    usage = None
    first_content = True
    async with client.stream("POST", path, json=payload) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code, None
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if first_content and _has_content(chunk):
                first_content = False
                summary.ttfts_s.append(asyncio.get_running_loop().time() - started)
            usage = chunk.get("usage") or usage
    return 200, usage


def _has_content(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices", [])
    return any(c.get("text") or c.get("delta", {}).get("content") for c in choices)
