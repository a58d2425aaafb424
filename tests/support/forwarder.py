"""A loopback TCP forwarder for tests and benchmarks: a slow or broken network path in front of a real server.

Every byte, in either direction, is passed on `delay_s` after it arrived (a delay line: the
order and the spacing of the bytes are kept, so a stream keeps its pace and only starts later).
`cut_after_events=n` forwards the answer up to its n-th server-sent event and then closes both
sides, as a proxy that dies mid-answer does. What the clients sent is kept in `received`.

    with Forwarder(upstream_port, delay_s=0.1) as path:
        url = f"http://127.0.0.1:{path.port}/v1"
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from contextlib import suppress

_EVENT = b"data: "


class Forwarder:
    def __init__(self, upstream_port: int, delay_s: float = 0.0, cut_after_events: int | None = None) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.delay_s = delay_s
        self.cut_after_events = cut_after_events
        self.received = bytearray()  # everything the clients sent (requests, heads and bodies)
        self.port = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None

    def start(self) -> Forwarder:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.settimeout(0.05)
        self._listener, self.port = listener, listener.getsockname()[1]
        self._spawn(self._accept_loop)
        return self

    def close(self) -> None:
        self._stopping.set()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in sockets:
            _shutdown(sock)
        for thread in threads:
            thread.join(timeout=2)
        if self._listener is not None:
            self._listener.close()
        for sock in sockets:
            sock.close()

    def __enter__(self) -> Forwarder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="forwarder")  # type: ignore[arg-type]
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.upstream, timeout=5)
            for sock in (client, upstream):
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            self._pipe(client, upstream, record=True)
            self._pipe(upstream, client, record=False)

    def _pipe(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        line: queue.Queue[tuple[float, bytes]] = queue.Queue()
        self._spawn(self._read, source, line, record)
        self._spawn(self._write, line, source, sink, record)

    def _read(self, source: socket.socket, line: queue.Queue[tuple[float, bytes]], record: bool) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if record and data:
                with self._lock:
                    self.received += data
            line.put((time.monotonic() + self.delay_s, data))
            if not data:
                return

    def _write(self, line: queue.Queue[tuple[float, bytes]], source: socket.socket, sink: socket.socket,
               request_side: bool) -> None:
        answered = bytearray()
        while True:
            due, data = line.get()
            if self._stopping.wait(max(0.0, due - time.monotonic())):
                return
            if not data:
                with suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            if not request_side and self.cut_after_events is not None:
                cut = _nth(bytes(answered + data), _EVENT, self.cut_after_events + 1)
                if cut is not None:
                    with suppress(OSError):
                        sink.sendall(data[: max(0, cut - len(answered))])
                    for sock in (sink, source):  # the path dies: both sides see the connection end
                        _shutdown(sock)
                    return
                answered += data
            try:
                sink.sendall(data)
            except OSError:
                return


def _nth(data: bytes, needle: bytes, n: int) -> int | None:
    position = -1
    for _ in range(n):
        position = data.find(needle, position + 1)
        if position < 0:
            return None
    return position


def _shutdown(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
