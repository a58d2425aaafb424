"""The POST routes against bodies an attacker (or a broken client) sends: the token is checked
before a byte of the body is read, bodies are capped while streaming, and odd JSON (1,000 deep,
a lone surrogate, a 30-digit token count) is a 4xx, never a 500; a full disk is a 503."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.alerting.alertmanager_payload import am_payload
from tests.support.appserver import serve_app
from tests.support.latency import healthz_probe, rss_bytes

pytestmark = pytest.mark.alone  # a /healthz latency bar (tests/support/latency.py): run with no neighbours

TOKEN = "hostile-test-token-5c2b"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SAMPLE = {"model": "qwen3-8b", "prompt": "hi", "response": "hello"}


@contextmanager
def served(**api: Any) -> Iterator[tuple[Monitor, str]]:
    monitor = Monitor(load_settings(None, {"api": {"token": TOKEN, **api}, "infra": {"nvml": {"enabled": False}}}))
    with serve_app(monitor) as url:
        yield monitor, url


def push_body(url: str, path: str, size: int, headers: str = "") -> tuple[str, int]:
    """Announce and stream `size` bytes of body to `path`; returns the status line and how many
    bytes the server took before it answered (or closed)."""
    host, port = url.removeprefix("http://").split(":")
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {size}\r\n{headers}\r\n")
        sock.sendall(head.encode())
        chunk = b" " * (1 << 20)
        sock.settimeout(0.05)
        answer = b""
        while sent < size and not answer:
            with suppress(BrokenPipeError, ConnectionResetError, TimeoutError, BlockingIOError):
                sent += sock.send(chunk[: size - sent])
            try:
                answer = sock.recv(4096)
            except (TimeoutError, BlockingIOError):
                pass
            except (ConnectionResetError, BrokenPipeError):
                break
        sock.settimeout(10)
        if not answer:
            answer = sock.recv(4096)
    return answer.split(b"\r\n", 1)[0].decode(), sent


def test_unauthenticated_huge_body_is_refused_before_it_is_read() -> None:
    size = 100 * 1024 * 1024  # the 100 MB that took RSS from 208 to 740 MB and /healthz past 10 s
    with served() as (_, url), healthz_probe(url) as probe:
        probe.wait_for_answers(30)
        quiet, before = len(probe.times), rss_bytes()
        answers = [push_body(url, "/api/v1/alertmanager", size) for _ in range(3)]  # three, as in #18
        grown = rss_bytes() - before
        probe.wait_for_answers(quiet + 30)
        probe.check(quiet, "3 unauthenticated 100 MB bodies")
    for status, sent in answers:
        assert status.endswith("401 Unauthorized"), status
        assert sent < size // 4, f"the server read {sent} bytes of an unauthenticated body"
    assert grown < 32 * 1024 * 1024, f"RSS grew {grown / 2**20:.0f} MiB"


def test_authenticated_body_over_the_cap_is_413_while_streaming() -> None:
    with served(max_body_bytes=64 * 1024) as (_, url):
        status, sent = push_body(url, "/api/v1/alertmanager", 50 * 1024 * 1024, f"Authorization: Bearer {TOKEN}\r\n")
        assert status.endswith("413 Request Entity Too Large") or " 413 " in status, status
        assert sent < 25 * 1024 * 1024

        def endless() -> Iterator[bytes]:  # chunked: no Content-Length to refuse up front
            for _ in range(200):
                yield b" " * 65536

        answer = httpx.post(f"{url}/api/v1/alertmanager", content=endless(), headers=AUTH, timeout=10)
        assert answer.status_code == 413


def deep(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


@pytest.mark.parametrize("path", ["/api/v1/alertmanager", "/api/v1/samples"])
def test_odd_json_is_a_client_error(path: str) -> None:
    nested_labels = json.dumps(am_payload()).replace('"severity": "critical"', '"severity": ' + '{"a":' * 999 + "1"
                                                                                  + "}" * 999)
    bodies = {
        "1,000 deep": deep(1000),
        "100,000 deep": deep(100_000),
        "deep inside a label": nested_labels.encode(),
        "lone surrogate": json.dumps(am_payload(pod="\ud800x") if "alertmanager" in path
                                     else {**SAMPLE, "response": "\ud800"}).encode(),
        "not JSON": b"{nope",
        "5,000-digit number": b'{"alerts": [], "n": ' + b"9" * 5000 + b"}",
    }
    with served() as (_, url):
        for name, body in bodies.items():
            answer = httpx.post(f"{url}{path}", content=body, headers=AUTH, timeout=10)
            assert answer.status_code in (400, 422), (name, answer.status_code, answer.text[:200])
        assert httpx.get(f"{url}/healthz").status_code == 200


def test_huge_output_tokens_is_422() -> None:
    with served() as (_monitor, url):
        for tokens in (10**30, 2**63, -1):
            answer = httpx.post(f"{url}/api/v1/samples", json={**SAMPLE, "output_tokens": tokens}, headers=AUTH)
            assert answer.status_code == 422, (tokens, answer.text)
        fine = httpx.post(f"{url}/api/v1/samples", json={**SAMPLE, "output_tokens": 123}, headers=AUTH)
        assert fine.status_code == 202 and fine.json()["stored"] == 1


def test_full_disk_is_503_on_both_write_routes() -> None:
    with served() as (monitor, url):
        with monitor.store.engine.connect() as connection:  # the in-memory store: one connection
            pages = connection.execute(text("PRAGMA page_count")).scalar()
            connection.execute(text(f"PRAGMA max_page_count = {pages}"))  # SQLite: "database or disk is full"
        bulky = [{**SAMPLE, "request_id": f"r{i}", "response": "x" * 2000} for i in range(50)]
        samples = httpx.post(f"{url}/api/v1/samples", json=bulky, headers=AUTH)
        alerts = httpx.post(f"{url}/api/v1/alertmanager", headers=AUTH,
                            json={**am_payload(), "alerts": am_payload()["alerts"] * 1 + [
                                {**am_payload()["alerts"][0], "labels": {"alertname": "Big", "n": str(i),
                                                                         "pad": "y" * 500}}
                                for i in range(50)]})
        assert samples.status_code == 503 and "retry" in samples.json()["error"]
        assert alerts.status_code == 503
        with monitor.store.engine.connect() as connection:
            connection.execute(text("PRAGMA max_page_count = 1073741823"))
        deadline = time.monotonic() + 10
        while httpx.post(f"{url}/api/v1/samples", json=bulky, headers=AUTH).status_code != 202:
            assert time.monotonic() < deadline
            time.sleep(0.05)


@pytest.mark.parametrize("path", ["/api/v1/alertmanager", "/api/v1/samples"])
def test_a_client_that_goes_away_mid_body_gets_a_line_not_a_traceback(
        path: str, caplog: pytest.LogCaptureFixture) -> None:
    """A sender stopped mid-post (the demo's request-log feed when the demo stops did this): the
    route said so in a traceback ("Exception in ASGI application: ClientDisconnect")."""
    caplog.set_level(logging.INFO)
    with served() as (monitor, url):
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          f"Authorization: Bearer {TOKEN}\r\nContent-Length: 10000\r\n\r\n").encode() + b'[{"model"')
        deadline = time.monotonic() + 20
        while not any("the client went away" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
            time.sleep(0.05)
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert monitor.quality.store.samples_between(0, 2e10) == []
    line = next(r.getMessage() for r in caplog.records if "the client went away" in r.getMessage())
    assert line == f"POST {path}: the client went away after 9 of 10000 bytes of the body; nothing stored"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], \
        [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
