"""The monitor's own server under a connection flood (#18 item 5): a few hundred slow
connections on loopback, and /healthz still answers, scrapes keep landing, descriptors stay
bounded, the log stays small. And the repeat filter that keeps a flood to one log line."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from monitor.config import load_settings
from monitor.logfilter import RepeatFilter
from monitor.server import connection_cap
from tests.conftest import FIXTURES
from tests.support.latency import healthz_probe
from tests.support.pageserver import Page, PageServer
from tests.support.served_process import infermon_serve

pytestmark = pytest.mark.alone  # a /healthz latency bar (tests/support/latency.py): run with no neighbours

SLOW = 300
CAP = 64


def wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def open_sockets(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):  # closed while we look
            count += os.readlink(fd).startswith("socket:")
    return count


def test_slow_connections_neither_starve_healthz_nor_scrapes(tmp_path: Path) -> None:
    pages = PageServer().start()
    pages.set("/metrics", Page((FIXTURES / "sample_vllm_v1.prom").read_text()))
    config = {
        "server": {"max_connections": CAP, "header_timeout": "3s"},
        "storage": {"url": f"sqlite:///{tmp_path / 'monitor.db'}"},
        "infra": {"nvml": {"enabled": False}},
        "service": {"scrape_interval": "1s", "targets": [{"name": "vllm-a", "url": pages.url("/metrics")}]},
    }
    slow: list[socket.socket] = []
    try:
        with infermon_serve(tmp_path, config) as url, healthz_probe(url) as probe:
            probe.wait_for_answers(30)
            quiet, failures, scrapes = len(probe.times), probe.failures, pages.hits["/metrics"]
            log_size = (tmp_path / "infermon.out").stat().st_size
            port = int(url.rsplit(":", 1)[1])
            for _ in range(SLOW):  # each starts a request head and never finishes it
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                slow.append(sock)
            wait_for(lambda: open_sockets(url.pid) <= CAP + 16, seconds=10)  # the cap, the scrape pool, the listener
            # Held: the cap's worth of slow connections stay open until the header timeout.
            burst = len(probe.times)
            probe.wait_for_answers(burst + 50)
            # What answered while the 300 arrived (accepts and evictions: a blip, no failure) is not the bar's.
            probe.times[quiet:burst] = []
            probe.check(quiet, f"{SLOW} slow connections, {CAP} held at the cap")
            assert probe.failures - failures <= 2, "/healthz refused under the flood"
            wait_for(lambda: pages.hits["/metrics"] >= scrapes + 3)  # scrapes kept landing
            assert 'inference_target_up{target="vllm-a"} 1.0' in httpx.get(f"{url}/metrics").text
            wait_for(lambda: open_sockets(url.pid) <= 16, seconds=15)  # the header timeout closed the rest
            assert (tmp_path / "infermon.out").stat().st_size - log_size < 20_000
    finally:
        for sock in slow:
            sock.close()
        pages.close()


def test_a_trickled_request_head_is_cut_off(tmp_path: Path) -> None:
    config = {"server": {"header_timeout": "2s"}, "storage": {"url": f"sqlite:///{tmp_path / 'monitor.db'}"},
              "infra": {"nvml": {"enabled": False}}}
    with infermon_serve(tmp_path, config) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            started = time.monotonic()
            closed = False
            for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                try:
                    sock.sendall(bytes([byte]))
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
                    break
                sock.settimeout(0.3)
                try:
                    if sock.recv(1) == b"":
                        closed = True
                        break
                except TimeoutError:
                    pass
            assert closed, "a request head sent a byte at a time was never cut off"
            assert time.monotonic() - started < 6


def test_the_connection_cap_keeps_descriptors_for_scrapes() -> None:
    settings = load_settings(None, {"server": {"max_connections": 5000, "fd_reserve": 256}})
    assert connection_cap(settings.server, 1024) == 768
    assert connection_cap(settings.server, 65536) == 5000


def test_repeated_log_lines_are_counted_not_written() -> None:
    clock = [0.0]
    repeat = RepeatFilter(10.0, clock=lambda: clock[0])

    def record(message: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, message, args, None)

    assert repeat.filter(record("accept failed: %s", "Too many open files"))
    passed = 0
    for _ in range(20_000):
        clock[0] += 0.0001
        passed += repeat.filter(record("accept failed: %s", "Too many open files"))
    assert passed == 0
    assert repeat.filter(record("something else"))  # another message is not held back
    clock[0] = 12.0
    again = record("accept failed: %s", "Too many open files")
    assert repeat.filter(again)
    assert again.getMessage() == "accept failed: Too many open files (repeated 20000 times in the last 12 s)"
    clock[0] = 30.0
    plain = record("accept failed: %s", "Too many open files")
    assert repeat.filter(plain) and plain.getMessage() == "accept failed: Too many open files"


def test_a_flood_that_stops_still_gets_its_count_written() -> None:
    clock = [0.0]
    repeat = RepeatFilter(10.0, clock=lambda: clock[0])
    logger = logging.getLogger("infermon.test.flood")
    written: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            written.append(record.getMessage())

    handler = Collect()
    handler.addFilter(repeat)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for _ in range(500):
            clock[0] += 0.001
            logger.warning("accept failed: %s", "Too many open files")
        assert written == ["accept failed: Too many open files"]
        clock[0] = 5.0
        assert repeat.flush() == 0  # the window has not passed: nothing to say yet
        clock[0] = 11.0  # the flood stopped; no new line brings its count out
        assert repeat.flush() == 1
        assert written[-1] == "accept failed: Too many open files (repeated 499 times in the last 11 s, then no more)"
        assert repeat.flush() == 0  # said once
        logger.warning("accept failed: %s", "Too many open files")
        assert written[-1] == "accept failed: Too many open files"  # a new flood starts with its first line
    finally:
        logger.removeHandler(handler)
