"""The one HTTP/1.1 client under the scrapes and the bench's stream: httptools' parser (llhttp, in C:
what uvicorn runs on) on an asyncio protocol, each read of the socket handed to the parser in the
protocol's own callback, with no stream, pool lock or anyio layer between. The waiting coroutine
wakes once, when the answer has ended.

    Reader          one answer read within its bounds: a 2xx (or 200) body at most `limit` bytes
                    (`limits.ByteCap`, declared or streamed), an error body cut at `error_limit`
                    (its first bytes say why), a redirect's body never read; `take` is where the
                    body's bytes go (kept whole, or read as they arrive: the bench's SSE)
    Connection      one connection, one request at a time; bytes nobody asked for cost it
    Connections     kept-alive connections, one per request in flight; a request that fails before
                    any answer (a kept connection the server was closing as it went out) is sent
                    again once, on a new connection, as Go's net/http (and so Prometheus) does

Failures keep the words httpx (h11) gives them, so a target's reason reads the same on either
client: `Gone` before any answer ("RemoteProtocolError: Server disconnected without sending a
response."), `Broken` during one ("... peer closed connection without sending complete message
body (received 100 bytes, expected 200)"). The deadline is the caller's (`asyncio.timeout` around
the whole exchange, redirects and the second try included).
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar, cast

import httptools

from monitor.wire.limits import ByteCap, Refusal, TooLarge

HEAD_BYTES = 64 * 1024  # an answer's status line and headers (plus the read that passes it)
READ_ERROR, PROTOCOL_ERROR = "ReadError", "RemoteProtocolError"
NO_ANSWER = "Server disconnected without sending a response."
_UNREAD = "peer closed connection without sending complete message body"


class Gone(Exception):
    """The exchange failed before any answer came; the reason is safe to show."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Broken(Gone):
    """The connection failed during the answer."""


class _Stop(Exception):
    """The reader has what it needs: the answer ends here, its rest unread."""


class _Unasked(Exception):
    """Bytes after the answer: nobody asked for them."""


class Reader:
    """One answer, read within its bounds (the connection fills `status`, `reason`, `headers`)."""

    def __init__(self, limit: int, error_limit: int, refuse: Refusal = TooLarge, ok: range = range(200, 201)) -> None:
        self.cap = ByteCap(limit, refuse)
        self.error_limit, self.ok = error_limit, ok
        self.status, self.reason = 0, b""
        self.headers: list[tuple[bytes, bytes]] = []  # names in lower case, in the answer's order
        self.error = False  # an answer whose status is not `ok`: its body is read for its reason only
        self.chunks: list[bytes] = []
        self.size = 0  # bytes of an error body kept

    def header(self, name: bytes) -> bytes:
        """The first value of header `name` (lower case), or b""."""
        return next((value for key, value in self.headers if key == name), b"")

    def head(self) -> bool:
        """The head has come: False ends the answer there (a redirect's body is never read)."""
        if 300 <= self.status < 400:
            return False
        if self.status not in self.ok:
            self.error = True
            return self.error_limit > 0
        self.cap.declared(self.header(b"content-length"))
        return True

    def body(self, data: bytes) -> bool:
        """A piece of the body: False when no more is wanted."""
        if self.error:
            room = self.error_limit - self.size
            self.chunks.append(data[:room])
            self.size += min(len(data), room)
            return self.size < self.error_limit
        self.cap.take(len(data))
        self.take(data)
        return True

    def take(self, data: bytes) -> None:
        self.chunks.append(data)

    def arrived(self) -> None:
        """Bytes arrived (called before they are parsed: the time of a chunk is that of its read)."""

    def end(self) -> None:
        """The answer is complete."""

    def content(self) -> bytes:
        """The body read, once: the pieces are not kept past it."""
        body, self.chunks = b"".join(self.chunks), []
        return body


def request(method: bytes, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes = b"") -> bytes:
    """An HTTP/1.1 request's bytes; a body gets its Content-Length. ValueError for a header value
    that holds a line break (it would end the head early)."""
    lines = [method, b" ", target, b" HTTP/1.1\r\n"]
    for name, value in headers:
        if b"\r" in value or b"\n" in value or b"\0" in value:
            raise ValueError(f"the value of header {name.decode('latin-1')} holds a line break")
        lines += (name, b": ", value, b"\r\n")
    if body or method == b"POST":
        lines.append(b"Content-Length: %d\r\n" % len(body))
    lines += (b"\r\n", body)
    return b"".join(lines)


class Connection(asyncio.Protocol):
    """One connection: feeds what arrives to the parser, the parser's callbacks to the `Reader`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.socket_transport: object = None  # the socket's own transport (under TLS, the one asyncio's wraps)
        self.origin: Origin | None = None
        self.lost = False  # the peer closed (or reset) it, or sent what nobody asked for
        self.idle_since = 0.0
        self.waiter: asyncio.Future[bool] | None = None
        self.reader: Reader | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.answered = self.complete = self.keep_alive = self.informational = False
        self.head_bytes = self.body_bytes = 0

    async def exchange(self, request: bytes, reader: Reader) -> bool:
        """Send `request`, feed its answer to `reader`; -> True when the answer was read whole."""
        assert self.transport is not None
        self.reader, self.parser = reader, httptools.HttpResponseParser(self)
        self.answered = self.complete = self.keep_alive = self.informational = False
        self.head_bytes = self.body_bytes = 0
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        try:
            return await self.waiter
        finally:
            self.waiter = self.reader = self.parser = None  # an answer cut short leaves none behind

    def open(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def reusable(self) -> bool:
        """Whether the last answer ended in order and the connection can carry the next request."""
        return self.complete and self.keep_alive and self.open()

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # No isinstance check: uvloop's TCP transport (the loop uvicorn takes where uvloop is
        # installed, as in vLLM's images) is a transport without subclassing asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)
        self.socket_transport = getattr(getattr(transport, "_ssl_protocol", None), "_transport", None) or transport

    def data_received(self, data: bytes) -> None:
        reader, parser = self.reader, self.parser
        if reader is None or parser is None or self.waiter is None or self.waiter.done():
            self.close()  # bytes nobody asked for: this connection is not trusted again
            return
        if not self.answered:
            if self.head_bytes > HEAD_BYTES:
                self._end(self._failure(PROTOCOL_ERROR, f"answer head larger than {HEAD_BYTES // 1024} KiB"))
                return
            self.head_bytes += len(data)
        reader.arrived()
        try:
            parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # what one of the callbacks below raised
            stop = exc.__context__ or exc
            if isinstance(stop, _Unasked):
                self.close()
            else:
                self._end(False if isinstance(stop, _Stop) else stop)
        except httptools.HttpParserError as exc:
            self._end(self._failure(PROTOCOL_ERROR, str(exc) or type(exc).__name__))

    def eof_received(self) -> bool:
        reader = self.reader
        if reader is not None and self.waiter is not None and not self.waiter.done() and self._runs_to_close():
            reader.arrived()
            try:  # a body without a length or chunks ends where the connection does
                self.complete = True
                reader.end()
                self._end(True)
            except Exception as exc:
                self._end(exc)
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        _unlink(self.socket_transport)
        if self.waiter is None or self.waiter.done():
            return
        if exc is not None:
            self._end(self._failure(READ_ERROR, str(exc) or type(exc).__name__))
        elif not self.answered:
            self._end(self._failure(PROTOCOL_ERROR, NO_ANSWER))
        else:
            declared = self.reader.header(b"content-length") if self.reader is not None else b""
            told = (f"received {self.body_bytes} bytes, expected {int(declared)}" if declared.isdigit()
                    else "incomplete chunked read")
            self._end(self._failure(PROTOCOL_ERROR, f"{_UNREAD} ({told})"))

    # -- httptools' callbacks ----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            raise _Unasked

    def on_status(self, reason: bytes) -> None:
        assert self.reader is not None
        self.reader.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.reader is not None
        self.reader.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        assert self.reader is not None and self.parser is not None
        status = self.parser.get_status_code()
        if status < 200:  # 100 Continue and the like: the answer follows
            self.informational, self.reader.headers, self.reader.reason = True, [], b""
            return
        self.answered, self.reader.status = True, status
        if not self.reader.head():
            raise _Stop

    def on_body(self, data: bytes) -> None:
        assert self.reader is not None
        self.body_bytes += len(data)
        if not self.reader.body(data):
            raise _Stop

    def on_message_complete(self) -> None:
        assert self.reader is not None and self.parser is not None
        if self.informational:
            self.informational = False
            return
        self.keep_alive = self.parser.should_keep_alive()  # (read here: the parser forgets it once the message ends)
        self.complete = True
        self.reader.end()
        self._end(True)

    # -- endings -----------------------------------------------------------------------------------

    def _runs_to_close(self) -> bool:
        if not self.answered or self.complete or self.reader is None:
            return False
        names = {name for name, _ in self.reader.headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    def _failure(self, kind: str, reason: str) -> Gone:
        return (Broken if self.answered else Gone)(f"{kind}: {reason}")

    def _end(self, outcome: bool | BaseException) -> None:
        if outcome is not True:
            self.close()  # the rest of the answer is not read: the connection cannot carry another
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if isinstance(outcome, BaseException):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)


def _unlink(transport: object) -> None:
    """Free a lost connection's transport by reference counting, not by the cyclic collector.

    asyncio's selector transport (CPython 3.11, the image's) keeps its read callback, a method bound
    to itself, after the connection is lost: a cycle with the transport, its socket and its extras.
    Under `infermon serve` a transport that lived through a job of the worker thread is frozen
    (monitor/heap.py), so every closed connection stayed in memory until the next full collection:
    one per scrape of a target answering an error status, one per flap of a target that comes and
    goes (docs/hardening.md, "Flapping targets"). Nothing reads the callback once the transport has
    called `connection_lost` (its reader was removed when it closed); uvloop's transports have none.
    """
    if getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = None  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int


R = TypeVar("R", bound=Reader)


class Connections:
    """Kept-alive connections, one per request in flight: an idle one is reused while it is open, of
    the same origin and idle no longer than `keepalive_s`; one that must close after its answer
    (`Connection: close`, HTTP/1.0, an error status, an answer cut short) is closed."""

    def __init__(self, tls: ssl.SSLContext | None = None, keepalive_s: float = math.inf) -> None:
        self.tls, self.keepalive_s = tls, keepalive_s
        self.idle: list[Connection] = []

    async def exchange(self, origin: Origin, request: bytes, reader: Callable[[], R]) -> R:
        """`request` to `origin`, its answer read by a new `reader()`: OSError (ssl.SSLError) when
        no connection is made, `Gone`/`Broken` when it fails, what the reader raises."""
        for attempt in (1, 2):
            connection = await self._connection(origin)
            answer = reader()
            try:
                whole = await connection.exchange(request, answer)
            except Broken:
                connection.close()
                raise
            except Gone:
                connection.close()
                if attempt == 2:
                    raise
                continue  # sent on a connection the server was closing: once more, on a new one
            except BaseException:  # a deadline or the reader's refusal mid-answer: its state is unknown
                connection.close()
                raise
            if whole and not answer.error and connection.reusable():
                connection.idle_since = time.monotonic()
                self.idle.append(connection)
            else:
                connection.close()
            return answer
        raise AssertionError("unreachable")  # pragma: no cover

    async def _connection(self, origin: Origin) -> Connection:
        while self.idle:
            kept = self.idle.pop()
            if kept.origin == origin and kept.open() and time.monotonic() - kept.idle_since <= self.keepalive_s:
                return kept
            kept.close()
        tls = None
        if origin.scheme == "https":
            tls = self.tls = self.tls or ssl.create_default_context()
        _, connection = await asyncio.get_running_loop().create_connection(
            Connection, origin.host, origin.port, ssl=tls, server_hostname=origin.host if tls else None)
        connection.origin = origin
        return connection

    def kept(self) -> Connection | None:
        """The connection the next request takes, if one is kept."""
        return self.idle[-1] if self.idle else None

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()
