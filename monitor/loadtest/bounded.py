"""What one bench request may keep: its answer's bytes are counted as they arrive and the answer
is ended at a cap, never read whole.

    2xx answer        at most `response_bytes` (declared or streamed), and at most `event_bytes`
                      between two blank lines (one SSE event: what the SDK buffers before parsing)
    3xx/4xx/5xx       the body is cut at `error_bytes`: the status decides the outcome, the first
                      bytes give the reason, the rest is never read
    compressed        identity is asked for; a 2xx answer compressed anyway is refused (its size
                      once decoded cannot be bounded by the bytes that arrive)

The SDK is handed an httpx client whose transport does this, so every request the bench sends
(warm-up and measured) is bounded the same way. The limit of one request and its tally live in a
context variable (`counting`) that the load sets around each request, so the transport knows
which request a response belongs to without any change to the SDK's calls.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx

from monitor.wire.limits import ByteCap

RESPONSE_FLOOR_BYTES = 4 * 1024 * 1024  # a request's answer may always be this large ...
RESPONSE_BYTES_PER_TOKEN = 2048  # ... or this much a max_token, whichever is more (a chunk is ~250 B)
EVENT_BYTES = 256 * 1024  # one SSE event (a delta); a token's chunk with logprobs is a few KB
ERROR_BYTES = 64 * 1024  # the body of an error answer, read only for its reason

_SSE_BOUNDARIES = (b"\n\n", b"\r\r", b"\r\n\r\n")  # an event ends at a blank line


class ResponseTooLarge(ValueError):
    """An answer past its cap, ended there; the message is the reason."""


class CompressedAnswer(ValueError):
    """A 2xx answer with a content coding although identity was asked for."""


@dataclass(frozen=True)
class Caps:
    response_bytes: int = RESPONSE_FLOOR_BYTES  # used when no request's own limit is set
    event_bytes: int = EVENT_BYTES
    error_bytes: int = ERROR_BYTES


@dataclass
class Kept:
    """One request's tally: the bytes handed to the SDK, and why it was ended, if it was."""

    limit: int | None = None
    bytes: int = 0
    too_large: str | None = None


_CURRENT: contextvars.ContextVar[Kept | None] = contextvars.ContextVar("infermon_bench_kept", default=None)


@contextlib.contextmanager
def counting(limit: int | None = None) -> Iterator[Kept]:
    """Counts the answers of the requests sent inside the block (one task) against `limit`."""
    kept = Kept(limit)
    token = _CURRENT.set(kept)
    try:
        yield kept
    finally:
        _CURRENT.reset(token)


def response_limit(max_tokens: int, fixed: int | None = None) -> int:
    """`fixed` when given, else the floor or RESPONSE_BYTES_PER_TOKEN per asked token."""
    return fixed if fixed is not None else max(RESPONSE_FLOOR_BYTES, RESPONSE_BYTES_PER_TOKEN * max_tokens)


class BoundedTransport(httpx.AsyncBaseTransport):
    """Wraps a transport: asks for identity coding and caps every answer's body."""

    def __init__(self, inner: httpx.AsyncBaseTransport, caps: Caps | None = None) -> None:
        self.inner, self.caps = inner, caps or Caps()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Accept-Encoding"] = "identity"
        kept = _CURRENT.get()
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)  # an async transport's body
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        success = 200 <= response.status_code < 300
        body: httpx.AsyncByteStream
        headers = response.headers
        if not success:
            # Only the first bytes, for the reason; a compressed error body is dropped, not decoded.
            headers = httpx.Headers([(k, v) for k, v in response.headers.multi_items()
                                     if k.lower() not in ("content-encoding", "content-length")])
            body = _CutBody(response.stream, 0 if coding not in ("", "identity") else self.caps.error_bytes)
        else:
            limit = kept.limit if kept is not None and kept.limit is not None else self.caps.response_bytes
            body = _CappedBody(response.stream, limit, self.caps.event_bytes, kept,
                               response.headers.get("content-length", ""), coding)
        return httpx.Response(response.status_code, headers=headers, stream=body, extensions=response.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CutBody(httpx.AsyncByteStream):
    """The first `cap` bytes of a body; the rest stays unread (the connection is closed, not reused)."""

    def __init__(self, inner: httpx.AsyncByteStream, cap: int) -> None:
        self.inner, self.cap = inner, cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        room = self.cap
        if room <= 0:
            return
        async for chunk in self.inner:
            yield chunk[:room]
            room -= len(chunk)
            if room <= 0:
                return

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CappedBody(httpx.AsyncByteStream):
    """A 2xx body passed on until it passes `cap` bytes in all or `event_cap` in one SSE event:
    then ResponseTooLarge, which ends the request (the SDK closes the response)."""

    def __init__(self, inner: httpx.AsyncByteStream, cap: int, event_cap: int, kept: Kept | None,
                 declared: str, coding: str) -> None:
        self.inner, self.cap, self.event_cap, self.kept = inner, cap, event_cap, kept
        self.declared, self.coding = declared, coding

    def _too_large(self, reason: str) -> ResponseTooLarge:
        if self.kept is not None:
            self.kept.too_large = reason
        return ResponseTooLarge(reason)

    def _refuse(self, cap: int, declared: int | None) -> ResponseTooLarge:
        if declared is not None:
            return self._too_large(f"response too large: {declared} bytes declared, more than {size(cap)}")
        return self._too_large(f"response too large: more than {size(cap)}")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.coding not in ("", "identity"):
            raise CompressedAnswer(f"the answer is compressed ({_short(self.coding)}) although identity was "
                                   "asked for: its size cannot be bounded")
        bound = ByteCap(self.cap, self._refuse)  # the wire's one byte cap
        bound.declared(self.declared)
        in_event, tail = 0, b""
        async for chunk in self.inner:
            bound.take(len(chunk))
            in_event, tail = _since_event(tail, chunk, in_event)
            if in_event > self.event_cap:
                raise self._too_large(f"response too large: one SSE event of more than {size(self.event_cap)}")
            if self.kept is not None:
                self.kept.bytes += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def _since_event(tail: bytes, chunk: bytes, before: int) -> tuple[int, bytes]:
    """Bytes since the last blank line, after `chunk`; `tail` (the last 3 bytes before it) finds a
    boundary split between two chunks."""
    joined = tail + chunk
    ends = [at + len(mark) for mark in _SSE_BOUNDARIES if (at := joined.rfind(mark)) >= 0]
    return (len(joined) - max(ends) if ends else before + len(chunk)), joined[-3:]


def size(count: int) -> str:
    """4194304 -> "4 MiB", 65536 -> "64 KiB", 1000 -> "1000 bytes"."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= factor and count % factor == 0:
            return f"{count // factor} {unit}"
    return f"{count} bytes"


_SIZE = re.compile(r"^\s*(\d+)\s*(b|kb|kib|mb|mib|gb|gib)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1 << 10, "mb": 1000**2, "mib": 1 << 20, "gb": 1000**3, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """'8MiB', '500kB', '1048576' -> bytes (positive)."""
    match = _SIZE.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise ValueError("a positive size, e.g. 8MiB, 500kB or 1048576 (bytes)")
    return int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
