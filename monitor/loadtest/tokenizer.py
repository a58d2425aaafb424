"""Input lengths counted by the engine's own tokenizer, before the load, where it offers one.

    vLLM           POST /tokenize {"model", "messages", "add_generation_prompt": true} -> {"count", ...}
    llama-server   POST /apply-template {"messages"} -> {"prompt"}, then
                   POST /tokenize {"content": prompt, "add_special": true, "parse_special": true} -> {"tokens"}

Both apply the chat template, so a count is the prompt tokens the engine will see for that
request (what its `usage.prompt_tokens` says afterwards, cache or not). Another engine, or one
that refuses, leaves the lengths at the client's estimate, said so. Each call has the probes'
deadline and byte cap; the first failure stops the counting and is recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from monitor.loadtest.conditions import PROBE_MAX_BYTES, PROBE_TIMEOUT_S, cut
from monitor.loadtest.data import Request
from monitor.loadtest.stats import distribution

TOKENIZE_SAMPLE = 100  # requests counted (their distribution stands for the run's, as the estimate's does)
ENGINES = ("vllm", "llamacpp")


class _Refused(Exception):
    """The engine answered a count request with anything but its count: the counting stops."""


async def exact_input_lengths(http: httpx.AsyncClient, base: str, model: str, engine: str | None,
                              requests: Sequence[Request], *, timeout_s: float = PROBE_TIMEOUT_S,
                              max_bytes: int = PROBE_MAX_BYTES, sample: int = TOKENIZE_SAMPLE,
                              api_key: str | None = None) -> dict[str, Any] | None:
    """{"input_tokens": {mean, p50, p95, p99}, "from": how, "requests": n}, {"error": why}, or None
    where the engine has no tokenizer endpoint we know. `api_key` goes as a bearer token (a
    llama-server started with --api-key guards these endpoints too)."""
    if engine not in ENGINES:
        return None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    counts = []
    try:
        for request in list(requests[:sample]):
            counts.append(await _count(http, base, model, engine, list(request.messages),
                                       _Limits(timeout_s, max_bytes, headers)))
    except _Refused as exc:
        return {"error": cut(str(exc))}
    if not counts:
        return None
    how = ("POST /tokenize with the chat template" if engine == "vllm"
           else "POST /apply-template, then POST /tokenize")
    return {"input_tokens": distribution(counts), "from": f"the engine's tokenizer: {how}", "requests": len(counts)}


@dataclass(frozen=True)
class _Limits:
    timeout_s: float
    max_bytes: int
    headers: dict[str, str]


async def _count(http: httpx.AsyncClient, base: str, model: str, engine: str, messages: list[dict[str, str]],
                 limits: _Limits) -> int:
    if engine == "vllm":
        body = {"model": model, "messages": messages, "add_generation_prompt": True}
        count = (await _post(http, f"{base}/tokenize", body, limits)).get("count")
    else:
        prompt = (await _post(http, f"{base}/apply-template", {"messages": messages}, limits)).get("prompt")
        if not isinstance(prompt, str):
            raise _Refused("/apply-template answered no prompt")
        body = {"content": prompt, "add_special": True, "parse_special": True}
        tokens = (await _post(http, f"{base}/tokenize", body, limits)).get("tokens")
        count = len(tokens) if isinstance(tokens, list) else None
    if not isinstance(count, int) or isinstance(count, bool):
        raise _Refused("/tokenize answered no count")
    return count


async def _post(http: httpx.AsyncClient, url: str, body: dict[str, Any], limits: _Limits) -> dict[str, Any]:
    """One JSON exchange, one deadline for all of it, the answer read to `max_bytes` at most."""
    timeout_s, max_bytes = limits.timeout_s, limits.max_bytes
    try:
        async with asyncio.timeout(timeout_s), http.stream("POST", url, json=body, headers=limits.headers) as response:
            if response.status_code != 200:
                raise _Refused(f"{url.rsplit('/', 1)[-1]}: HTTP {response.status_code}")
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > max_bytes:
                    raise _Refused(f"{url.rsplit('/', 1)[-1]}: more than {max_bytes} bytes")
    except TimeoutError:
        raise _Refused(f"{url.rsplit('/', 1)[-1]}: timed out after {timeout_s:g}s") from None
    except httpx.HTTPError as exc:
        raise _Refused(f"{url.rsplit('/', 1)[-1]}: {type(exc).__name__}") from None
    try:
        answer = json.loads(bytes(data))
    except ValueError:
        raise _Refused(f"{url.rsplit('/', 1)[-1]}: not JSON") from None
    if not isinstance(answer, dict):
        raise _Refused(f"{url.rsplit('/', 1)[-1]}: not a JSON object")
    return answer
