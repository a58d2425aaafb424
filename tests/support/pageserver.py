"""A real loopback HTTP server for tests, where every path can misbehave on demand.

Raw sockets, one daemon thread per connection, HTTP/1.1 with `Connection: close`, so a test
controls every byte: a good page, a page that grows between scrapes, a status code, a body cut
short of its Content-Length, HTML, binary garbage, an oversized body, a connection that is
accepted and then never answered (HANG), a body sent a byte at a time (TRICKLE), a reset.

    with PageServer() as server:
        server.set("/good", Generated(lambda hit: page_for(hit)))
        server.set("/hang", Hang())
        url = server.url("/good")
        refused = server.refused_url()      # a port nobody listens on
        ...
        server.set("/good", status_page(404))   # the target disappears

`PageServer(keep_alive=True)` keeps a connection open after each complete page (`Page`,
`Generated`), with TCP_NODELAY, as uvicorn (vLLM) and Go servers do: the benchmarks' engine
pages, a scrape that does not pay for a connection (`growing(variants)` advances with wall time).

Shutting down never blocks: hung and trickling handlers wait on one `stopping` event, every
open connection is shut down, and all threads are daemons.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Protocol

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
HTML = "text/html; charset=utf-8"

_REASONS = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 503: "Service Unavailable"}
_MAX_HEAD = 65536


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Connection:
    """What a behaviour gets: the accepted socket, the parsed request, the server's stop event."""

    sock: socket.socket
    request: Request
    hit: int  # 1 for the first request to this path
    stopping: threading.Event
    keep_alive: bool = False  # the connection stays open for the next request after this answer

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_head(self, status: int, headers: dict[str, str]) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
        closing = {} if self.keep_alive else {"Connection": "close"}
        lines += [f"{name}: {value}" for name, value in {**headers, **closing}.items()]
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def hold(self, seconds: float | None = None) -> bool:
        """Wait until the server stops (True) or `seconds` pass (False)."""
        return self.stopping.wait(seconds)


class Behaviour(Protocol):
    def serve(self, conn: Connection) -> None: ...


def _bytes(body: str | bytes) -> bytes:
    return body.encode("utf-8") if isinstance(body, str) else body


@dataclass(frozen=True)
class Page:
    """A complete response: body, status, content type; `chunked` omits Content-Length."""

    body: str | bytes
    status: int = 200
    content_type: str = TEXT
    chunked: bool = False

    def serve(self, conn: Connection) -> None:
        data = _bytes(self.body)
        if not self.chunked:
            conn.send_head(self.status, {"Content-Type": self.content_type, "Content-Length": str(len(data))})
            conn.send(data)
            return
        conn.send_head(self.status, {"Content-Type": self.content_type, "Transfer-Encoding": "chunked"})
        for start in range(0, len(data), 65536):
            piece = data[start : start + 65536]
            conn.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        conn.send(b"0\r\n\r\n")


@dataclass(frozen=True)
class Generated:
    """A page made per request: `make(hit)` returns the body (or a whole `Page`)."""

    make: Callable[[int], str | bytes | Page]
    content_type: str = TEXT

    def serve(self, conn: Connection) -> None:
        made = self.make(conn.hit)
        page = made if isinstance(made, Page) else Page(made, content_type=self.content_type)
        page.serve(conn)


@dataclass(frozen=True)
class Truncated:
    """Declares the whole body's Content-Length, sends only the first `keep` bytes, closes.

    `chunked`: sends the first `keep` bytes as one chunk and closes without the last chunk.
    """

    body: str | bytes
    keep: int
    content_type: str = TEXT
    chunked: bool = False

    def serve(self, conn: Connection) -> None:
        data = _bytes(self.body)
        assert self.keep < len(data), "nothing would be cut"
        if self.chunked:
            conn.send_head(200, {"Content-Type": self.content_type, "Transfer-Encoding": "chunked"})
            conn.send(f"{self.keep:x}\r\n".encode() + data[: self.keep] + b"\r\n")
            return
        conn.send_head(200, {"Content-Type": self.content_type, "Content-Length": str(len(data))})
        conn.send(data[: self.keep])


@dataclass(frozen=True)
class Hang:
    """Reads the request and sends nothing back, until the server shuts down.

    (`PageServer.hung_url()` is the rawer form: a port that accepts and never even reads.)
    """

    def serve(self, conn: Connection) -> None:
        conn.hold()


@dataclass(frozen=True)
class Trickle:
    """Answers 200 at once, then sends the body one byte every `interval` seconds, forever."""

    body: str | bytes = b"# a very slow page\n"
    interval: float = 0.5

    def serve(self, conn: Connection) -> None:
        data = _bytes(self.body)
        conn.send_head(200, {"Content-Type": TEXT})  # no length: the body ends when we close
        position = 0
        while not conn.hold(self.interval):
            conn.send(data[position % len(data) : position % len(data) + 1])
            position += 1


@dataclass(frozen=True)
class Reset:
    """Closes the connection with a TCP reset instead of an answer."""

    def serve(self, conn: Connection) -> None:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.sock.close()


def growing(variants: list[bytes], step_seconds: float = 1.0) -> Generated:
    """A page whose counters advance with wall time: variant i is served in second i."""
    start = time.monotonic()

    def page(hit: int) -> bytes:
        index = min(int((time.monotonic() - start) / step_seconds), len(variants) - 1)
        return variants[index]

    return Generated(page)


def status_page(status: int, body: str = "") -> Page:
    return Page(body or f"{status} {_REASONS.get(status, 'Status')}\n", status=status)


def html_page(inner: str = "<h1>Welcome to nginx!</h1>") -> Page:
    return Page(f"<!DOCTYPE html>\n<html><head><title>x</title></head><body>{inner}</body></html>\n",
                content_type=HTML)


def garbage_page(size: int = 4096, seed: int = 7) -> Page:
    """Deterministic random bytes: not UTF-8, not text (served as octet-stream)."""
    data = bytes(random.Random(seed).randrange(256) for _ in range(size))
    return Page(b"\xff\xfe\x00" + data, content_type="application/octet-stream")


def oversized_page(head: str, limit: int, chunked: bool) -> Page:
    """`head` padded with comment lines to more than `limit` bytes: valid text, just too big."""
    filler = "# padding padding padding padding padding padding padding padding padding\n"
    repeats = (limit - len(head.encode())) // len(filler) + 2
    return Page(head + filler * repeats, chunked=chunked)


@dataclass
class PageServer:
    """Threaded loopback server on a free port; paths not set answer 404."""

    host: str = "127.0.0.1"
    keep_alive: bool = False
    hits: Counter[str] = field(default_factory=Counter)
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._routes: dict[str, Behaviour] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._held: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.port = 0

    # -- life cycle -------------------------------------------------------------------------

    def start(self) -> PageServer:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, 0))
        listener.listen(64)
        listener.settimeout(0.05)  # the accept loop checks `stopping` this often
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._spawn(self._accept_loop, listener)
        return self

    def close(self) -> None:
        """Stop at once: release hung handlers, shut every connection, never wait long."""
        self._stopping.set()
        with self._lock:
            sockets = [*self._open, *self._held]
            threads = list(self._threads)
        for sock in sockets:
            _shutdown(sock)
        deadline = time.monotonic() + 1.0  # for all threads together; they are daemons anyway
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._listener is not None:
            self._listener.close()
        for sock in sockets:
            sock.close()

    def __enter__(self) -> PageServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- configuration ----------------------------------------------------------------------

    def set(self, path: str, behaviour: Behaviour) -> str:
        """Serve `behaviour` at `path` (replacing what was there); returns the path's URL."""
        with self._lock:
            self._routes[path] = behaviour
        return self.url(path)

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def refused_url(self, path: str = "/metrics") -> str:
        """A URL whose port refuses connections: bound (so nobody else gets it), never listening."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self.host, 0))
        with self._lock:
            self._held.append(sock)
        return f"http://{self.host}:{sock.getsockname()[1]}{path}"

    def hung_url(self, path: str = "/metrics") -> str:
        """A URL whose port accepts connections and then holds them: no read, no byte sent."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((self.host, 0))
        listener.listen(64)
        listener.settimeout(0.05)
        with self._lock:
            self._held.append(listener)
        self._spawn(self._accept_loop, listener, True)
        return f"http://{self.host}:{listener.getsockname()[1]}{path}"

    # -- serving ----------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="pageserver")
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self, listener: socket.socket, hold: bool = False) -> None:
        while not self._stopping.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed under us
            with self._lock:
                self._open.add(sock)
            if not hold:
                self._spawn(self._handle, sock)

    def _handle(self, sock: socket.socket) -> None:
        try:
            sock.settimeout(None)
            if self.keep_alive:  # head and body are two writes: no 40 ms delayed-ACK stall between them
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            keep_open = True
            while keep_open:  # one request and its answer per turn, while the connection is kept alive
                keep_open = self._answer(sock)
        except (OSError, ValueError):
            pass  # the client went away (timed out, closed) or sent no HTTP: nothing to answer
        finally:
            with self._lock:
                self._open.discard(sock)
            _shutdown(sock)
            sock.close()

    def _answer(self, sock: socket.socket) -> bool:
        """Serve one request; True when the connection stays open for the next."""
        request = _read_request(sock)
        if request is None:
            return False
        with self._lock:
            behaviour = self._routes.get(request.path) or status_page(404)
            self.hits[request.path] += 1
            self.requests.append(request)
            hit = self.hits[request.path]
        reuse = self.keep_alive and isinstance(behaviour, Page | Generated)  # the others end the connection
        behaviour.serve(Connection(sock, request, hit, self._stopping, reuse))
        return reuse


def _read_request(sock: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk or len(data) > _MAX_HEAD:
            return None
        data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    request_line, *header_lines = head.split("\r\n")
    method, target, _ = request_line.split(" ", 2)
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Request(method, target.split("?", 1)[0], headers)


def _shutdown(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def page_server() -> Iterator[PageServer]:
    """`with page_server() as server:`; as a pytest fixture: `with PageServer() as s: yield s`."""
    server = PageServer().start()
    try:
        yield server
    finally:
        server.close()
