"""The demo's quality scenario: the SIMULATED engine's answers reach the request log, a SIMULATED
judge scores them, and a run happens within the first minute.

- `serve_judge`: the judge simulator (monitor/sim/judge.py) on a loopback port, in this loop.
- `feed_request_log`: asks the vLLM simulator real chat completions and posts each prompt and
  answer to the monitor's POST /api/v1/samples, as a gateway would.
- `simulated_history`: a week of earlier answers (filler text of the simulator's kind, marked
  `simulated-history`) so the baseline checks have days to compare with. The history's answers
  are shorter than today's by DEMO_LENGTH_DRIFT, well past `length_changed`'s threshold, so the
  length drift and its cause show in every run (at +27-32 % it sat on the 0.3 threshold, and the
  cause was `unknown` in one run, `length_changed` in the next).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import httpx
import uvicorn

from monitor.aio import finish
from monitor.quality.sample import Sample
from monitor.sim.judge import create_judge_app
from monitor.sim.profile import LatencyProfile
from monitor.sim.protocol import filler_text
from monitor.sim.server import InLoopServer, serve_in_loop

QUESTIONS = (
    "Summarise the causes of the 2008 financial crisis.", "How do I reverse a linked list in Python?",
    "What is the difference between TCP and UDP?", "Explain KV-cache paging in vLLM.",
    "Write a haiku about GPUs.", "给我介绍一下长城的历史。", "What are the side effects of ibuprofen?",
    "Translate 'good morning' into French and German.", "How does PagedAttention reduce fragmentation?",
    "My e-mail is alice@example.com, can you draft a reply to my landlord?",
)


async def serve_judge(port: int, started: asyncio.Event, latency_s: float = 0.0,
                      failing: Callable[[], bool] = lambda: False) -> None:
    config = uvicorn.Config(create_judge_app(latency_s, failing), host="127.0.0.1", port=port, log_level="warning",
                            log_config=None, access_log=False, lifespan="off")
    await serve_in_loop(InLoopServer(config), started)


FEED_MAX_TOKENS = (48, 320)  # each request of today's feed asks a max_tokens drawn from this range
FEED_SEED = 7  # ... by a random.Random of this seed
# Today's mean answer length over the history's, by design: 2.5 x length_change_ratio (0.3); the
# feed's seeded max_tokens and the simulator's draws made +47 % and +50 % of it in two demos.
DEMO_LENGTH_DRIFT = 0.75


def expected_answer_tokens(profile: LatencyProfile | None = None,
                           max_tokens: tuple[int, int] = FEED_MAX_TOKENS) -> float:
    """The mean length of the simulator's answers to the feed (the demo's engine runs the default
    profile): min(the engine's own length, the request's max_tokens), both uniform --
    E[min] = sum over k >= 1 of P(X >= k) P(Y >= k)."""
    profile = profile or LatencyProfile()
    def at_least(bounds: tuple[int, int], k: int) -> float:
        low, high = bounds
        return min(1.0, max(0.0, (high - k + 1) / (high - low + 1)))

    return sum(at_least(profile.output_tokens, k) * at_least(max_tokens, k)
               for k in range(1, min(profile.output_tokens[1], max_tokens[1]) + 1))


def history_tokens(drift: float = DEMO_LENGTH_DRIFT) -> tuple[int, int]:
    """The range the history's lengths are drawn from: a mean `drift` below today's expected one."""
    mean = expected_answer_tokens() / (1 + drift)
    return round(mean / 2), round(mean * 1.5)


async def feed_request_log(sim_url: str, monitor_url: str, count: int, concurrency: int = 8,
                           max_tokens: tuple[int, int] = FEED_MAX_TOKENS, seed: int = FEED_SEED) -> int:
    """`count` answers of the simulator posted to the request log; returns how many were stored."""
    rng = random.Random(seed)
    limit = asyncio.Semaphore(concurrency)
    stored = 0

    async def one(client: httpx.AsyncClient, index: int) -> None:
        nonlocal stored
        question = f"{QUESTIONS[index % len(QUESTIONS)]} (request {index})"
        async with limit:
            answer = await client.post(f"{sim_url}/v1/chat/completions", json={
                "messages": [{"role": "user", "content": question}], "max_tokens": rng.randint(*max_tokens)})
        if answer.status_code != 200:
            return  # the simulator's error-burst fault: nothing to log
        body = answer.json()
        sample = {"model": body["model"], "prompt": [{"role": "user", "content": question}],
                  "response": body["choices"][0]["message"]["content"], "request_id": body["id"],
                  "output_tokens": body["usage"]["completion_tokens"]}
        posted = await client.post(f"{monitor_url}/api/v1/samples", json=sample)
        stored += posted.json().get("stored", 0) if posted.status_code == 202 else 0

    client = httpx.AsyncClient(timeout=120, trust_env=False)
    try:
        await asyncio.gather(*(one(client, i) for i in range(count)), return_exceptions=True)
    finally:
        await finish(client.aclose())
    return stored


def simulated_history(model: str, today: str, days: int, per_day: int, timezone: str,
                      tokens: tuple[int, int] | None = None, seed: int = 11) -> list[Sample]:
    """`tokens`: the range of the answers' lengths (`history_tokens()` by default)."""
    tokens = tokens or history_tokens()
    rng = random.Random(seed)
    zone = ZoneInfo(timezone)
    out: list[Sample] = []
    first = datetime.fromisoformat(today).date()
    for back in range(1, days + 1):
        start = datetime.combine(first - timedelta(days=back), time(0), zone).timestamp()
        for index in range(per_day):
            count = rng.randint(*tokens)
            out.append(Sample(model=model, prompt=f"user: {QUESTIONS[index % len(QUESTIONS)]}",
                              response=filler_text(0, count).strip(), timestamp=start + rng.uniform(0, 86000),
                              request_id=f"history-{back}-{index}", output_tokens=count,
                              source="simulated-history"))
    return out
