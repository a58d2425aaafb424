"""A kept-alive connection that the server closes as the next scrape goes out is no DOWN.

uvicorn (vLLM's and SGLang's server) closes an idle connection after 5 s; the demo scrapes every
5 s, and on a busy host a scrape drifts past it. In a hog run the demo logged `collector
service[vllm-sim] failed: RemoteProtocolError: Server disconnected without sending a response`
twice in a minute, and the overview showed the target without its numbers. Prometheus (Go's
net/http) sends such a GET again on a new connection; so do both of our fetch paths, once.
"""

from __future__ import annotations

import asyncio
import ssl

import httpx
import pytest

from monitor.config import load_settings
from monitor.scrape import ScrapeError, fetch_page, fetch_target_page, target_connection
from tests.support.rawhttp import RawHttpServer

PAGE = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n"
ANSWER = HEAD % len(PAGE) + PAGE


class ClosesReusedConnections(RawHttpServer):
    """Answers the first request of a connection and keeps it alive; reads a second request on it
    and closes the connection without a word (the keep-alive race, made certain). `answer_none`:
    closes every connection unanswered."""

    def __init__(self, answer_none: bool = False) -> None:
        super().__init__()
        self.answer_none = answer_none

    def answer(self, served: int) -> bytes | None:
        if self.answer_none or served:
            return None
        return ANSWER


def _settings() -> object:
    return load_settings(None, {"service": {"targets": [{"name": "a", "url": "http://127.0.0.1:1/metrics"}]}}).service


async def _three_scrapes_core(server: ClosesReusedConnections) -> list[str]:
    async with server as base:
        url = f"{base}/metrics"
        conn = target_connection(_settings(), ssl.create_default_context())  # type: ignore[arg-type]
        try:
            return [(await fetch_target_page(conn, url, 5.0, 1 << 20)).text for _ in range(3)]
        finally:
            await conn.aclose()


async def _three_scrapes_httpx(server: ClosesReusedConnections) -> list[str]:
    async with server as base, httpx.AsyncClient(trust_env=False) as client:
        url = f"{base}/metrics"
        return [(await fetch_page(client, url, 5.0, 1 << 20)).text for _ in range(3)]


@pytest.mark.parametrize("scrapes", [_three_scrapes_core, _three_scrapes_httpx], ids=["kept", "httpx"])
def test_a_connection_closed_under_the_next_scrape_is_sent_again_once(scrapes: object) -> None:
    server = ClosesReusedConnections()
    pages = asyncio.run(scrapes(server))  # type: ignore[operator]
    assert pages == [PAGE.decode()] * 3
    # each later scrape: the kept-alive connection (closed unanswered), then a new one
    assert (server.connections, server.requests) == (3, 5)


async def _one_core(server: ClosesReusedConnections) -> None:
    async with server as base:
        url = f"{base}/metrics"
        conn = target_connection(_settings(), ssl.create_default_context())  # type: ignore[arg-type]
        try:
            await fetch_target_page(conn, url, 5.0, 1 << 20)
        finally:
            await conn.aclose()


async def _one_httpx(server: ClosesReusedConnections) -> None:
    async with server as base, httpx.AsyncClient(trust_env=False) as client:
        url = f"{base}/metrics"
        await fetch_page(client, url, 5.0, 1 << 20)


@pytest.mark.parametrize("scrape", [_one_core, _one_httpx], ids=["kept", "httpx"])
def test_a_server_that_never_answers_fails_the_scrape_after_one_retry(scrape: object) -> None:
    server = ClosesReusedConnections(answer_none=True)
    with pytest.raises(ScrapeError, match="RemoteProtocolError: Server disconnected without sending a response"):
        asyncio.run(scrape(server))  # type: ignore[operator]
    assert (server.connections, server.requests) == (2, 2)  # once more, not a loop
