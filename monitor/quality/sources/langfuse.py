"""Langfuse: the day's generations in, the judge's scores back out. Every Langfuse call is here.

Reads `GET /api/public/v2/observations` (type=GENERATION, cursor pagination: keep asking while
`meta.cursor` is present, even after a short or empty page), writes `POST /api/public/scores`
with ids derived from (date, observation, score name), so a rerun overwrites its scores
instead of adding new ones. Basic auth with the public/secret key pair; 429 waits Retry-After.

The `langfuse` package is not used: its client's method names changed twice in 2026, and these
two plain HTTP calls are the whole surface we need.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from monitor.aio import finish
from monitor.quality.sample import Sample

log = logging.getLogger("monitor.quality.langfuse")

OBSERVATIONS = "/api/public/v2/observations"
SCORES = "/api/public/scores"
FIELDS = "core,basic,io,model,usage"
MAX_429_RETRIES = 8
_SCORE_NAMESPACE = uuid.UUID("8f2d6a52-3c1e-4c57-9a43-6f1f0b6f7c11")


class LangfuseError(Exception):
    plain = True  # reads as a reason in the health book


@dataclass(frozen=True)
class ScoreWrite:
    date: str
    trace_id: str
    observation_id: str | None
    name: str
    value: float
    data_type: str  # NUMERIC | BOOLEAN
    comment: str | None = None

    @property
    def id(self) -> str:
        """The same (date, observation, name) always gets the same id: Langfuse upserts by id."""
        key = f"{self.date}/{self.trace_id}/{self.observation_id or ''}/{self.name}"
        return f"infermon-{uuid.uuid5(_SCORE_NAMESPACE, key)}"


class LangfuseSource:
    name = "langfuse"

    def __init__(self, host: str, public_key: str, secret_key: str, *, page_size: int = 100, timeout_s: float = 30.0,
                 client: httpx.AsyncClient | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.client = client or httpx.AsyncClient(base_url=host.rstrip("/"), timeout=timeout_s, trust_env=False)
        self.auth = httpx.BasicAuth(public_key, secret_key)
        self.page_size = page_size
        self.sleep = sleep

    async def samples(self, start: float, end: float) -> list[Sample]:
        params: dict[str, Any] = {
            "type": "GENERATION", "fromStartTime": _iso(start), "toStartTime": _iso(end),
            "limit": self.page_size, "fields": FIELDS,
        }
        out: list[Sample] = []
        while True:
            body = (await self._request("GET", OBSERVATIONS, params=params)).json()
            out.extend(s for s in map(_sample, body.get("data") or []) if s is not None)
            cursor = (body.get("meta") or {}).get("cursor")
            if not cursor:
                return out
            params["cursor"] = cursor

    async def write_scores(self, scores: Sequence[ScoreWrite]) -> int:
        for score in scores:
            body = {"id": score.id, "traceId": score.trace_id, "name": score.name, "value": score.value,
                    "dataType": score.data_type, "comment": score.comment}
            if score.observation_id:
                body["observationId"] = score.observation_id
            await self._request("POST", SCORES, json=body)
        return len(scores)

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for _ in range(MAX_429_RETRIES + 1):
            response = await self.client.request(method, path, auth=self.auth, **kwargs)
            if response.status_code != 429:
                break
            wait = _retry_after(response.headers.get("retry-after"))
            log.info("langfuse: 429 on %s, waiting %.1fs", path, wait)
            await self.sleep(wait)
        if response.status_code in (401, 403):
            raise LangfuseError(f"langfuse: HTTP {response.status_code} on {path}: check the public/secret key pair")
        if response.status_code >= 400:
            raise LangfuseError(f"langfuse: HTTP {response.status_code} on {path}: {response.text[:200]}")
        return response

    async def aclose(self) -> None:
        await finish(self.client.aclose())


def _retry_after(header: str | None) -> float:
    try:
        return min(60.0, max(0.0, float(header))) if header is not None else 1.0
    except ValueError:
        return 1.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _sample(obs: dict[str, Any]) -> Sample | None:
    """A generation as a Sample; one without output text is not a response to judge."""
    response = _text(obs.get("output"))
    started = obs.get("startTime")
    if not response or not started:
        return None
    usage = obs.get("usageDetails") or obs.get("usage") or {}
    output_tokens = usage.get("output") if isinstance(usage, dict) else None
    return Sample(
        model=str(obs.get("providedModelName") or obs.get("model") or "unknown"),
        prompt=_text(obs.get("input")), response=response,
        timestamp=datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp(),
        request_id=str(obs["id"]), output_tokens=int(output_tokens) if isinstance(output_tokens, int | float) else None,
        source="langfuse", trace_id=obs.get("traceId"), observation_id=str(obs["id"]),
    )


def _text(value: Any) -> str:
    """Input/output as text: a string, a message, a list of messages, {"messages": [...]}, choices."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(filter(None, (_text(item) for item in value)))
    if isinstance(value, dict):
        for key in ("messages", "choices"):
            if key in value:
                return _text(value[key])
        if "message" in value:
            return _text(value["message"])
        content = value.get("content", value.get("text"))
        if content is not None:
            text = _text(content)
            return f"{value['role']}: {text}" if value.get("role") in ("user", "system") else text
    return str(value)
