"""Many engine pages from a few processes, cheap enough never to be the bottleneck of a fleet bench.

Each process is an asyncio server (keep-alive, TCP_NODELAY, one write per answer) that serves
every path `/t/<i>` the same growing page: variant k is served in step k, so counters advance
for both scrapers alike. The answers (head + body) are built once, before the processes fork.

    with PageFarm(variants, processes=2) as farm:
        farm.urls(1000)        # http://127.0.0.1:<port>/t/<i>, spread over the processes
        farm.cpu_seconds()     # the farm's own CPU, to show it is not the bottleneck
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import socket
import time
from multiprocessing.synchronize import Event

_HEAD = ("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
         "Content-Length: {}\r\n\r\n")
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class _Pages(asyncio.Protocol):
    def __init__(self, answers: list[bytes], start: float, step: float) -> None:
        self.answers, self.start, self.step = answers, start, step
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
            assert self.transport is not None
            if not path.startswith(b"/t/"):
                self.transport.write(_NOT_FOUND)
                continue
            index = min(int((time.monotonic() - self.start) / self.step), len(self.answers) - 1)
            self.transport.write(self.answers[index])


def _serve(sock: socket.socket, answers: list[bytes], step: float, stop: Event) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        server = await loop.create_server(lambda: _Pages(answers, start, step), sock=sock, backlog=4096)
        async with server:
            while not stop.is_set():
                await asyncio.sleep(0.2)

    asyncio.run(main())


class PageFarm:
    def __init__(self, variants: list[bytes], processes: int = 2, step_seconds: float = 5.0) -> None:
        self.answers = [_HEAD.format(len(body)).encode() + body for body in variants]
        self.page_bytes = len(variants[0]) if variants else 0
        self.step = step_seconds
        self.sockets: list[socket.socket] = []
        self.workers: list[multiprocessing.process.BaseProcess] = []
        self.context = multiprocessing.get_context("fork")
        self.stop = self.context.Event()
        for _ in range(processes):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(4096)
            self.sockets.append(sock)

    def urls(self, count: int) -> list[str]:
        ports = [s.getsockname()[1] for s in self.sockets]
        return [f"http://127.0.0.1:{ports[i % len(ports)]}/t/{i}" for i in range(count)]

    def cpu_seconds(self) -> float:
        return sum(process_cpu_seconds(w.pid) for w in self.workers if w.pid is not None)

    def __enter__(self) -> PageFarm:
        for sock in self.sockets:
            worker = self.context.Process(target=_serve, args=(sock, self.answers, self.step, self.stop), daemon=True)
            worker.start()
            self.workers.append(worker)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for worker in self.workers:
            worker.join(timeout=5)
            if worker.is_alive() and worker.pid is not None:
                os.kill(worker.pid, signal.SIGKILL)
                worker.join(timeout=5)
        for sock in self.sockets:
            sock.close()


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0
