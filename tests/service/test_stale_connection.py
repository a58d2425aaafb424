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
from monitor.scrape import ScrapeError, fetch_page, fetch_page_core, target_pool

PAGE = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"


class ClosesReusedConnections:
    """HTTP/1.1 on loopback: answers the first request of a connection and keeps it alive; reads
    a second request on it and closes the connection without a word (the keep-alive race, made
    certain). `answer_none`: closes every connection unanswered."""

    def __init__(self, answer_none: bool = False) -> None:
        self.answer_none = answer_none
        self.connections = 0
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/metrics"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                self.requests += 1
                if self.answer_none or served:
                    break
                served += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed it
        finally:
            writer.close()


def _settings() -> object:
    return load_settings(None, {"service": {"targets": [{"name": "a", "url": "http://127.0.0.1:1/metrics"}]}}).service


async def _three_scrapes_core(server: ClosesReusedConnections) -> list[str]:
    async with server as url:
        pool = target_pool(_settings(), ssl.create_default_context())  # type: ignore[arg-type]
        try:
            return [(await fetch_page_core(pool, url, 5.0, 1 << 20)).text for _ in range(3)]
        finally:
            await pool.aclose()


async def _three_scrapes_httpx(server: ClosesReusedConnections) -> list[str]:
    async with server as url, httpx.AsyncClient(trust_env=False) as client:
        return [(await fetch_page(client, url, 5.0, 1 << 20)).text for _ in range(3)]


@pytest.mark.parametrize("scrapes", [_three_scrapes_core, _three_scrapes_httpx], ids=["httpcore", "httpx"])
def test_a_connection_closed_under_the_next_scrape_is_sent_again_once(scrapes: object) -> None:
    server = ClosesReusedConnections()
    pages = asyncio.run(scrapes(server))  # type: ignore[operator]
    assert pages == [PAGE.decode()] * 3
    # each later scrape: the kept-alive connection (closed unanswered), then a new one
    assert (server.connections, server.requests) == (3, 5)


async def _one_core(server: ClosesReusedConnections) -> None:
    async with server as url:
        pool = target_pool(_settings(), ssl.create_default_context())  # type: ignore[arg-type]
        try:
            await fetch_page_core(pool, url, 5.0, 1 << 20)
        finally:
            await pool.aclose()


async def _one_httpx(server: ClosesReusedConnections) -> None:
    async with server as url, httpx.AsyncClient(trust_env=False) as client:
        await fetch_page(client, url, 5.0, 1 << 20)


@pytest.mark.parametrize("scrape", [_one_core, _one_httpx], ids=["httpcore", "httpx"])
def test_a_server_that_never_answers_fails_the_scrape_after_one_retry(scrape: object) -> None:
    server = ClosesReusedConnections(answer_none=True)
    with pytest.raises(ScrapeError, match="RemoteProtocolError: Server disconnected without sending a response"):
        asyncio.run(scrape(server))  # type: ignore[operator]
    assert (server.connections, server.requests) == (2, 2)  # once more, not a loop
