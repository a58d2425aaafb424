"""The bench's own streaming client: chat completions over HTTP/1.1 on an asyncio protocol, every
chunk read in the protocol's callback as its bytes arrive (the wire's client, monitor/wire/http1.py,
the one the scrapes run on).

Why not the SDK the canary measures through (`monitor.canary.probe.observe_stream`): on a small
machine the client's CPU comes out of the server's. Through the openai SDK on httpx a streamed
request cost the client 3.1-3.5x the CPU of `vllm bench serve` (aiohttp) against the same real
vLLM (`python -m bench.client_cpu`): each token's chunk went up through httpcore, h11, anyio, httpx
and the SDK's stream, one coroutine hop per layer. Here a read of the socket is one
`data_received` call: httptools (llhttp, the parser uvicorn runs on) takes the HTTP framing off in
C, the SSE decoder (`sse.SSEDecoder.feed_data`) cuts the events, and each event's JSON is recorded
at once, with the time its bytes arrived, on the canary's own `Recording`, so the numbers mean
what the canary's mean. The waiting coroutine wakes once, when the answer is complete. (h11, which
the scrapes ran on before the one wire, cost about twice as much here: its chunked framing is Python.)

What it keeps of the SDK path, so a bench run reads the same either way (`--client openai` keeps
that path, tests/loadtest/test_stream.py runs both against the same answers):

    the request     POST {base}/chat/completions, stream with usage asked for, the bench header,
                    `Accept-Encoding: identity`, a bearer key when one is given
    the bounds      those of bounded.py: the answer's bytes (declared or streamed), one SSE event's,
                    an error answer's body read only for its reason, a compressed answer refused
    failures        refused (no connection), timeout (one deadline for the whole request),
                    status (an error answer, with its JSON message), connection (broken), invalid
                    (not a chat-completion stream, an error event); a connection that breaks
                    before any answer is tried once more on a new one (a kept connection the
                    server was closing as we sent)
    connections     kept alive and reused, one per request in flight; a redirect is not followed
                    but named (give the target it points to)

HTTP proxies are not spoken: where the environment sets one for the target, `make_sender` takes
the SDK path, which honours it.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import httpx

import monitor
from monitor.canary.outcome import Failure, Observed
from monitor.canary.probe import Recording, error_message
from monitor.loadtest.bounded import Caps, CompressedAnswer, size
from monitor.loadtest.sse import SSEDecoder, record_chunk
from monitor.redaction import safe_url
from monitor.wire.http1 import Connections, Gone, Origin, Reader, request

USER_AGENT = f"infermon-bench/{monitor.__version__}"


class StreamClient:
    """One target's connections; `observe` sends one streamed chat completion and times it."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float, caps: Caps | None = None,
                 headers: dict[str, str] | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        url = httpx.URL(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"not an http(s) URL: {safe_url(base_url)}")
        self.origin = Origin(url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        self.path = (url.raw_path.decode("ascii").split("?")[0].rstrip("/") + "/chat/completions").encode("ascii")
        self.timeout_s, self.caps, self.clock = timeout_s, caps or Caps(), clock
        host = f"[{url.host}]" if ":" in url.host else url.host  # an IPv6 literal is bracketed
        host = host if url.port is None else f"{host}:{url.port}"
        fixed = {"Host": host, "User-Agent": USER_AGENT, "Content-Type": "application/json",
                 "Accept": "text/event-stream", "Accept-Encoding": "identity", **(headers or {})}
        if api_key:
            fixed["Authorization"] = f"Bearer {api_key}"
        if any(c in value for value in fixed.values() for c in "\r\n\0"):
            raise ValueError("a header value (the API key or the bench header) holds a line break")
        self.headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in fixed.items()]
        self._key = api_key or ""
        self.connections = Connections()

    async def observe(self, body: dict[str, Any], limit: int | None = None) -> tuple[Observed, str | None]:
        """One request (`body`: the chat completion's JSON, without `stream`), timed from just
        before it is sent; -> what it saw, and why its answer was ended at a cap (or None)."""
        payload = json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}).encode()
        sent = request(b"POST", self.path, self.headers, payload)
        limit = limit if limit is not None else self.caps.response_bytes
        started = self.clock()
        answers: list[_ChatAnswer] = []

        def reader() -> _ChatAnswer:  # a fresh one for each try
            answers.append(_ChatAnswer(self.caps, limit, started, self.clock))
            return answers[-1]

        failed: tuple[Failure, str] | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                answer = await self.connections.exchange(self.origin, sent, reader)
            if answer.error:
                failed = "status", answer.status_reason()
        except TimeoutError:
            failed = "timeout", f"no complete answer within {self.timeout_s:g}s"
        except Gone as gone:
            failed = "connection", gone.reason
        except _Ended as ended:
            failed = ended.failure, ended.detail
        except OSError as exc:  # no connection: refused, unreachable, no such host, TLS refused
            failed = "refused", f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # whatever a chunk held that we could not read: this answer fails, nothing hangs
            failed = "invalid", f"{type(exc).__name__}: {exc}"
        seen = answers[-1].seen if answers else Recording()
        if failed is not None:
            seen.fail(*failed)
        if self._key:
            seen.detail = seen.detail.replace(self._key, "<secret>")
        return seen.observed(), answers[-1].too_large if answers else None

    async def close(self) -> None:
        self.connections.close()


class _Ended(Exception):
    """Ends the answer where it stands (a cap, a redirect, a bad stream)."""

    def __init__(self, failure: Failure, detail: str) -> None:
        super().__init__(detail)
        self.failure, self.detail = failure, detail


class _ChatAnswer(Reader):
    """One streamed answer read as it arrives: each SSE event's chunk recorded, with the time its
    bytes arrived, on the canary's own `Recording`, within the bench's caps (bounded.py)."""

    def __init__(self, caps: Caps, limit: int, started: float, clock: Callable[[], float]) -> None:
        super().__init__(limit, caps.error_bytes, self._too_large, ok=range(200, 300))
        self.seen, self.started, self.clock, self.at = Recording(), started, clock, 0.0
        self.event_bytes = caps.event_bytes
        self.decoder = SSEDecoder()
        self.too_large: str | None = None

    def arrived(self) -> None:
        self.at = self.clock() - self.started

    def head(self) -> bool:
        status = self.seen.status = self.status
        coding = self.header(b"content-encoding").decode("latin-1").strip().lower()
        if 300 <= status < 400:
            where = safe_url(self.header(b"location").decode("latin-1")) or "another URL"
            raise _Ended("status", f"HTTP {status}: the server redirects to {where}: give that as the target")
        compressed = coding not in ("", "identity")
        if status not in self.ok and compressed:  # a compressed error body is dropped, not decoded
            raise _Ended("status", f"HTTP {status}: {self.reason.decode('latin-1') or 'error'}")
        if compressed:
            shown = coding if len(coding) <= 40 else coding[:37] + "..."
            raise _Ended("invalid", f"{CompressedAnswer.__name__}: the answer is compressed ({shown}) although "
                                    "identity was asked for: its size cannot be bounded")
        return super().head()

    def take(self, data: bytes) -> None:
        for event in self.decoder.feed_data(data):
            if isinstance(event, bytes):  # a plain `data: ` event: every chunk of an engine's stream
                raw: bytes | str = event
                if event.startswith(b"[DONE]"):
                    continue  # the body's end follows; the answer is complete there
            elif event.event is None or event.event == "error":
                raw = event.data
                if raw.startswith("[DONE]"):
                    continue
            else:
                continue  # a named event is not a chat-completion chunk
            try:
                chunk = json.loads(raw)
            except ValueError as exc:
                raise _Ended("invalid", f"{type(exc).__name__}: {exc}") from None
            if isinstance(chunk, dict) and chunk.get("error"):
                message = error_message(chunk) or "An error occurred during streaming"
                raise _Ended("invalid", f"APIError: {message}")
            plain = isinstance(event, bytes) or event.event is None  # an "error" event holds no chunk
            if plain and not record_chunk(self.seen, chunk, self.at):
                shown = raw[:120].decode("utf-8", "replace") if isinstance(raw, bytes) else raw[:120]
                raise _Ended("invalid", f"not a chat-completion chunk: {shown}")
        if self.decoder.pending_bytes > self.event_bytes:
            raise self._cap(f"response too large: one SSE event of more than {size(self.event_bytes)}")

    def end(self) -> None:
        if not self.error:
            self.decoder.close()
            self.seen.ended_s = self.at

    def status_reason(self) -> str:
        body = self.content()
        try:
            message = error_message(json.loads(body))
        except ValueError:
            message = None
        return f"HTTP {self.status}: {message or _first_line(body) or 'error'}"

    def _too_large(self, limit: int, declared: int | None) -> _Ended:
        if declared is not None:
            return self._cap(f"response too large: {declared} bytes declared, more than {size(limit)}")
        return self._cap(f"response too large: more than {size(limit)}")

    def _cap(self, reason: str) -> _Ended:
        self.too_large = reason
        return _Ended("invalid", f"ResponseTooLarge: {reason}")


def _first_line(body: bytes) -> str:
    line = body.decode("utf-8", "replace").strip().split("\n", 1)[0].strip()
    return line if len(line) <= 160 else line[:157] + "..."


def proxied(base_url: str) -> str | None:
    """The environment's proxy variable that applies to `base_url`, or None (then no proxy is used)."""
    url = httpx.URL(base_url)
    proxies = urllib.request.getproxies()
    if url.scheme not in proxies and "all" not in proxies:
        return None
    if urllib.request.proxy_bypass(url.host or ""):
        return None
    return f"{url.scheme.upper()}_PROXY" if url.scheme in proxies else "ALL_PROXY"
