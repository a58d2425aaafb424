"""The bench's own streaming client: chat completions over HTTP/1.1 on an asyncio protocol, every
chunk read in the protocol's callback as its bytes arrive.

Why not the SDK the canary measures through (`monitor.canary.probe.observe_stream`): on a small
machine the client's CPU comes out of the server's. Through the openai SDK on httpx a streamed
request cost the client 3.1-3.5x the CPU of `vllm bench serve` (aiohttp) against the same real
vLLM (`python -m bench.client_cpu`): each token's chunk went up through httpcore, h11, anyio, httpx
and the SDK's stream, one coroutine hop per layer. Here a read of the socket is one
`data_received` call: httptools (llhttp, the parser uvicorn runs on) takes the HTTP framing off in
C, the SSE decoder (`lean.LeanSSEDecoder.feed`) cuts the events, and each event's JSON is recorded
at once, with the time its bytes arrived, on the canary's own `Recording`, so the numbers mean
what the canary's mean. The waiting coroutine wakes once, when the answer is complete. (h11, as
the scrapes use it, cost about twice as much here: its chunked framing is Python.)

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
import ssl
import time
import urllib.request
from collections.abc import Callable
from typing import Any, cast

import httptools
import httpx

import monitor
from monitor.canary.outcome import Failure, Observed
from monitor.canary.probe import Recording, error_message
from monitor.loadtest.bounded import Caps, CompressedAnswer, size
from monitor.loadtest.lean import LeanSSEDecoder, record_chunk
from monitor.redaction import safe_url

USER_AGENT = f"infermon-bench/{monitor.__version__}"


class StreamClient:
    """One target's connections; `observe` sends one streamed chat completion and times it."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float, caps: Caps | None = None,
                 headers: dict[str, str] | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        url = httpx.URL(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"not an http(s) URL: {safe_url(base_url)}")
        self.host, self.port = url.host, url.port or (443 if url.scheme == "https" else 80)
        self.tls = ssl.create_default_context() if url.scheme == "https" else None
        path = (url.raw_path.decode("ascii").split("?")[0].rstrip("/") + "/chat/completions").encode("ascii")
        self.timeout_s, self.caps, self.clock = timeout_s, caps or Caps(), clock
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal is bracketed
        host = host if url.port is None else f"{host}:{url.port}"
        fixed = {"Host": host, "User-Agent": USER_AGENT, "Content-Type": "application/json",
                 "Accept": "text/event-stream", "Accept-Encoding": "identity", **(headers or {})}
        if api_key:
            fixed["Authorization"] = f"Bearer {api_key}"
        if any(c in value for value in fixed.values() for c in "\r\n\0"):
            raise ValueError("a header value (the API key or the bench header) holds a line break")
        self._head = b"POST " + path + b" HTTP/1.1\r\n" + b"".join(
            f"{name}: {value}\r\n".encode("latin-1") for name, value in fixed.items())
        self._key = api_key or ""
        self._idle: list[_Exchange] = []

    async def observe(self, body: dict[str, Any], limit: int | None = None) -> tuple[Observed, str | None]:
        """One request (`body`: the chat completion's JSON, without `stream`), timed from just
        before it is sent; -> what it saw, and why its answer was ended at a cap (or None)."""
        payload = json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}).encode()
        limit = limit if limit is not None else self.caps.response_bytes
        started = self.clock()
        exchange: _Exchange | None = None
        seen = Recording()
        try:
            async with asyncio.timeout(self.timeout_s):
                for attempt in (1, 2):
                    exchange = await self._connection()
                    seen = Recording()
                    try:
                        await exchange.send(self._head, payload, seen, started, limit)
                    except _GoneBeforeAnswer:
                        if attempt == 2:
                            raise
                        continue  # sent on a connection the server was closing: once more, on a new one
                    break
        except TimeoutError:
            seen.fail("timeout", f"no complete answer within {self.timeout_s:g}s")
        except _GoneBeforeAnswer as gone:
            seen.fail("connection", gone.reason)
        except OSError as exc:  # no connection: refused, unreachable, no such host, TLS refused
            seen.fail("refused", f"{type(exc).__name__}: {exc}")
        finally:
            if exchange is not None:
                if exchange.reusable():
                    self._idle.append(exchange)
                else:
                    exchange.close()
        if self._key:
            seen.detail = seen.detail.replace(self._key, "<secret>")
        return seen.observed(), exchange.too_large if exchange is not None else None

    async def _connection(self) -> _Exchange:
        while self._idle:
            exchange = self._idle.pop()
            if exchange.open():
                return exchange
        loop = asyncio.get_running_loop()
        _, exchange = await loop.create_connection(
            lambda: _Exchange(self.caps, self.clock), self.host, self.port, ssl=self.tls,
            server_hostname=self.host if self.tls is not None else None)
        return exchange

    async def close(self) -> None:
        for exchange in self._idle:
            exchange.close()
        self._idle.clear()


class _GoneBeforeAnswer(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Ended(Exception):
    """Ends the answer where it stands (a cap, an error answer read for its reason, a bad stream)."""

    def __init__(self, failure: Failure, detail: str, reuse: bool = False) -> None:
        super().__init__(detail)
        self.failure, self.detail, self.reuse = failure, detail, reuse


class _Exchange(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its answer handled as it arrives
    (httptools' parser calls back `on_headers_complete`, `on_body`, `on_message_complete`)."""

    def __init__(self, caps: Caps, clock: Callable[[], float]) -> None:
        self.caps, self.clock = caps, clock
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.waiter: asyncio.Future[None] | None = None
        self.too_large: str | None = None
        self.complete = self.keep_alive = False

    # -- the request -------------------------------------------------------------------------------

    async def send(self, head: bytes, payload: bytes, seen: Recording, started: float, limit: int) -> None:
        assert self.transport is not None
        self.seen, self.started, self.limit, self.at = seen, started, limit, 0.0
        self.parser = httptools.HttpResponseParser(self)
        self.decoder = LeanSSEDecoder()
        self.headers: list[tuple[bytes, bytes]] = []
        self.reason = b""
        self.success = self.complete = self.informational = self.keep_alive = False
        self.error_body = bytearray()
        self.total = 0
        self.too_large = None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(head + b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
        try:
            await self.waiter
        finally:
            self.waiter = None

    def reusable(self) -> bool:
        """Whether the last answer ended in order and the connection can carry the next request."""
        return (self.complete and self.keep_alive and self.waiter is None and not self.lost
                and self.transport is not None and not self.transport.is_closing())

    def open(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.waiter.done():
            self.close()  # bytes nobody asked for: the connection is not to be trusted again
            return
        self.at = self.clock() - self.started
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # raised by one of the callbacks below
            stop = exc.__context__
            if isinstance(stop, _Ended | _GoneBeforeAnswer):
                self._finish(stop)
            else:  # whatever a chunk held that we could not read: this answer fails, nothing hangs
                self._finish(_Ended("invalid", f"{type(stop).__name__}: {stop}"))
        except httptools.HttpParserError as exc:
            self._finish(self._broken(f"{type(exc).__name__}: {exc}"))

    def eof_received(self) -> bool:
        if self.waiter is not None and not self.waiter.done() and self._runs_to_close():
            self.at = self.clock() - self.started
            try:  # a body without a length or chunks ends where the connection does
                self.on_message_complete()
            except (_Ended, _GoneBeforeAnswer) as stop:
                self._finish(stop)
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.waiter is not None and not self.waiter.done():
            reason = f"{type(exc).__name__}: {exc}" if exc is not None else "the server closed the connection"
            self._finish(self._broken(reason))

    # -- httptools' callbacks: the answer ---------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.seen.status = status = self.parser.get_status_code()
        if status < 200:  # 100 Continue and the like: the answer follows
            self.informational, self.headers, self.reason = True, [], b""
            return
        self.success = 200 <= status < 300
        headers = dict(self.headers)
        coding = headers.get(b"content-encoding", b"identity").decode("latin-1").strip().lower()
        if 300 <= status < 400:
            where = safe_url(headers.get(b"location", b"").decode("latin-1")) or "another URL"
            raise _Ended("status", f"HTTP {status}: the server redirects to {where}: give that as the target")
        if not self.success:
            if coding not in ("", "identity"):  # a compressed error body is dropped, not decoded
                raise _Ended("status", f"HTTP {status}: {self.reason.decode('latin-1') or 'error'}")
            return
        if coding not in ("", "identity"):
            shown = coding if len(coding) <= 40 else coding[:37] + "..."
            raise _Ended("invalid", f"{CompressedAnswer.__name__}: the answer is compressed ({shown}) although "
                                    "identity was asked for: its size cannot be bounded")
        declared = headers.get(b"content-length", b"").decode("latin-1")
        if declared.isdigit() and int(declared) > self.limit:
            raise self._cap(f"response too large: {declared} bytes declared, more than {size(self.limit)}")

    def on_body(self, data: bytes) -> None:
        if not self.success:
            room = self.caps.error_bytes - len(self.error_body)
            self.error_body += data[:max(room, 0)]
            if len(data) >= room:
                raise self._status()
            return
        self.total += len(data)
        if self.total > self.limit:
            raise self._cap(f"response too large: more than {size(self.limit)}")
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
        if self.decoder.pending_bytes > self.caps.event_bytes:
            raise self._cap(f"response too large: one SSE event of more than {size(self.caps.event_bytes)}")

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            return
        if not self.success:
            raise self._status()
        self.decoder.close()
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # (read here: the parser forgets it once the message ends)
        self.seen.ended_s = self.at
        self._finish(None)

    # -- endings -----------------------------------------------------------------------------------

    def _runs_to_close(self) -> bool:
        if self.seen.status is None or self.complete:
            return False
        names = {name for name, _ in self.headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    def _status(self) -> _Ended:
        body = bytes(self.error_body)
        try:
            message = error_message(json.loads(body))
        except ValueError:
            message = None
        return _Ended("status", f"HTTP {self.seen.status}: {message or _first_line(body) or 'error'}")

    def _cap(self, reason: str) -> _Ended:
        self.too_large = reason
        return _Ended("invalid", f"ResponseTooLarge: {reason}")

    def _broken(self, reason: str) -> _Ended | _GoneBeforeAnswer:
        if self.seen.status is None:
            return _GoneBeforeAnswer(reason)
        return _Ended("connection", reason)

    def _finish(self, ended: _Ended | _GoneBeforeAnswer | None) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if isinstance(ended, _GoneBeforeAnswer):
            self.close()
            waiter.set_exception(ended)
            return
        if ended is not None:
            self.seen.fail(ended.failure, ended.detail)
            self.close()  # the rest of the answer is not read: the connection cannot be reused
        waiter.set_result(None)


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
