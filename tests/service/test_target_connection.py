"""The serve path's own connection per target (monitor.scrape.TargetConnection on the wire's
client, monitor/wire/http1.py), on hand-written HTTP/1.1 and on HTTPS, where a framework's server would hide
what happens on the connection: kept alive from one scrape to the next, dropped when idle past
its expiry, when the server says `Connection: close`, after an answer whose body it never reads
(an error page, a page over the limit), and verified against the CA it was given."""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import pytest
import trustme

from monitor.scrape import ScrapeError, TargetConnection, fetch_target_page
from tests.support.rawhttp import RawHttpServer

PAGE = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"


def answer(body: bytes, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n%s\r\n"
            % (status.encode(), len(body), extra)) + body


class Answers(RawHttpServer):
    """The same answer to every request of every connection."""

    def __init__(self, reply: bytes, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(tls)
        self.reply = reply

    def answer(self, served: int) -> bytes | None:
        return self.reply




async def _scrape(conn: TargetConnection, url: str, max_bytes: int = 1 << 20) -> str:
    return (await fetch_target_page(conn, url, 5.0, max_bytes)).text


def run(server: RawHttpServer, scrapes: int, keepalive_s: float = 60.0, max_bytes: int = 1 << 20,
        tls: ssl.SSLContext | None = None) -> list[str | Exception]:
    """`scrapes` fetches of the server's /metrics on one connection; each page, or its error."""
    async def go() -> list[str | Exception]:
        conn = TargetConnection(tls or ssl.create_default_context(), keepalive_s)
        results: list[str | Exception] = []
        async with server as base:
            try:
                for _ in range(scrapes):
                    try:
                        results.append(await _scrape(conn, f"{base}/metrics", max_bytes))
                    except ScrapeError as exc:
                        results.append(exc)
            finally:
                await conn.aclose()
            for _ in range(100):  # the server sees the client's close on its next read
                if server.open == 0:
                    break
                await asyncio.sleep(0.01)
        return results
    return asyncio.run(go())


def test_one_connection_serves_every_scrape_and_closes_with_the_target() -> None:
    server = Answers(answer(PAGE))
    assert run(server, 5) == [PAGE.decode()] * 5
    assert (server.connections, server.requests, server.open) == (1, 5, 0)


def test_a_connection_idle_past_its_expiry_is_not_reused() -> None:
    server = Answers(answer(PAGE))
    assert run(server, 3, keepalive_s=0.0) == [PAGE.decode()] * 3
    assert (server.connections, server.requests) == (3, 3)


def test_connection_close_from_the_server_opens_a_new_one_for_the_next_scrape() -> None:
    server = Answers(answer(PAGE, extra=b"Connection: close\r\n"))
    assert run(server, 3) == [PAGE.decode()] * 3
    assert server.connections == 3


def test_bytes_after_an_answer_cost_the_connection_not_the_next_scrape() -> None:
    # Whether they arrive with the answer or after it, the next scrape is answered on a new connection.
    server = Answers(answer(PAGE) + b"HTTP/1.1 200 OK garbage\r\n")
    assert run(server, 3) == [PAGE.decode()] * 3
    assert server.connections == 3


def test_bytes_on_an_idle_connection_mean_it_is_not_reused() -> None:
    """A server that writes on a kept-alive connection between scrapes (no request asked for them)."""
    connections, pushed, ended = [], asyncio.Event(), []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer(PAGE))
            await pushed.wait()
            writer.write(b"HTTP/1.1 200 OK\r\n")  # unasked
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer(b"# the unasked answer's connection was reused\n"))
            await reader.read()  # until the client closes
        writer.close()
        await writer.wait_closed()
        ended.append(writer)

    async def go() -> list[str]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/metrics"
        conn = TargetConnection(ssl.create_default_context(), 60.0)
        pages = [await _scrape(conn, url)]
        pushed.set()
        for _ in range(500):  # until the client has read the unasked bytes
            if conn.kept is None or not conn.kept.open():
                break
            await asyncio.sleep(0.01)
        pages.append(await _scrape(conn, url))
        await conn.aclose()
        for _ in range(500):  # until the server saw both connections closed
            if len(ended) == len(connections):
                break
            await asyncio.sleep(0.01)
        server.close()
        await server.wait_closed()
        return pages

    assert asyncio.run(go()) == [PAGE.decode()] * 2
    assert len(connections) == 2


@pytest.mark.parametrize(("reply", "error"), [
    (answer(b"x" * 50_000, "404 Not Found"), "HTTP 404"),  # its body is never read
    (answer(PAGE * 100), f"page larger than 1000 bytes ({len(PAGE) * 100})"),
], ids=["error-page", "declared-too-large"])
def test_an_answer_whose_body_is_not_read_costs_its_connection(reply: bytes, error: str) -> None:
    server = Answers(reply)
    results = run(server, 2, max_bytes=1000)
    assert [str(r) for r in results] == [error, error]
    assert server.connections == 2  # the unread rest of a body cannot precede the next answer


def test_a_page_that_grows_past_the_limit_unannounced_is_refused() -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"".join(b"%x\r\n%s\r\n" % (len(PAGE), PAGE) for _ in range(40)) + b"0\r\n\r\n")
    results = run(Answers(chunked), 1, max_bytes=1000)
    assert [str(r) for r in results] == ["page larger than 1000 bytes"]
    assert [str(r) for r in run(Answers(chunked), 1)] == [PAGE.decode() * 40]


def test_a_kept_alive_connection_holds_no_page_between_scrapes() -> None:
    """Between two scrapes the connection holds none of the last page: the body's pieces went with
    the answer. Kept on the connection until the next scrape, they held a page a target in memory
    (342 MB at 1,000 ten-model targets)."""
    import gc
    import tracemalloc

    big = PAGE * (2_000_000 // len(PAGE))
    server = Answers(answer(big))

    async def go() -> int:
        conn = TargetConnection(ssl.create_default_context(), 60.0)
        async with server as base:
            gc.collect()
            tracemalloc.start()
            try:
                page = await _scrape(conn, f"{base}/metrics", 4 << 20)
                assert len(page) == len(big)
                del page
                await asyncio.sleep(0)  # the step the answer woke ends: its wake-up (and the answer) go
                gc.collect()
                assert conn.kept is not None and conn.kept.open()  # kept alive for the next scrape
                return tracemalloc.get_traced_memory()[0]
            finally:
                tracemalloc.stop()
                await conn.aclose()

    held = asyncio.run(go())
    assert held < len(big) // 10, held


@pytest.mark.parametrize("https", [False, True], ids=["http", "https"])
def test_a_lost_connection_is_freed_without_the_cyclic_collector(
        https: bool, ca: trustme.CA, monkeypatch: pytest.MonkeyPatch) -> None:
    """A target down with an error page costs a connection per scrape (its body is never read), and
    one that comes and goes a connection per flap. asyncio's transport kept a cycle with itself
    after the connection was lost; under `infermon serve` it was frozen (monitor/heap.py) before it
    died, so 200 flapping targets grew the heap until the next full collection (#48 item 9). With
    the collector off, as for what is frozen, each lost connection's transport must still go."""
    import gc
    import weakref

    from monitor.wire.http1 import Connection

    made: list[weakref.ref[object]] = []
    connection_made = Connection.connection_made

    def spied(self: Connection, transport: asyncio.BaseTransport) -> None:
        connection_made(self, transport)
        made.append(weakref.ref(self.socket_transport))  # under TLS, the socket's own under asyncio's

    monkeypatch.setattr(Connection, "connection_made", spied)
    gc.collect()
    gc.disable()
    try:
        trusting = ssl.create_default_context()
        ca.configure_trust(trusting)
        server = Answers(answer(b"down", "500 Internal Server Error"), tls=_server_tls(ca) if https else None)
        results = run(server, 20, tls=trusting)
        alive = sum(ref() is not None for ref in made)
    finally:
        gc.enable()
    assert [str(r) for r in results] == ["HTTP 500"] * 20
    assert len(made) == 20  # a connection per scrape
    assert alive == 0, f"{alive} of {len(made)} lost connections still in memory"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _server_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


def test_https_with_the_targets_ca_is_scraped_on_one_connection(ca: trustme.CA) -> None:
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    server = Answers(answer(PAGE), tls=_server_tls(ca))
    assert run(server, 3, tls=trusting) == [PAGE.decode()] * 3
    assert server.connections == 1


def test_https_with_an_unknown_ca_is_down_and_says_why(ca: trustme.CA) -> None:
    server = Answers(answer(PAGE), tls=_server_tls(ca))
    (result,) = run(server, 1)  # the system's CAs only
    assert str(result) == "connection failed: TLS: unable to get local issuer certificate"
    assert server.requests == 0
