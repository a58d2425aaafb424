"""A server that closes each connection a moment after its streamed answer, without saying so
(`Connection: close`): llama.cpp's llama-server does (a TIME-WAIT per request, on the server's
side). A client that sends its next request on that kept connection before the close arrives
finds it gone before any answer. That is no failure of the engine: the canary and `infermon
bench` send such a request again, once, on a new connection, and a server that breaks every
connection still fails."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from monitor.canary.outcome import judge
from monitor.canary.probe import observe_stream
from monitor.loadtest.load import make_client

CHUNKS = [{"role": "assistant", "content": ""}, {"content": "Paris"}, {"content": " it is"}]


def _event(delta: dict[str, str], finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class ClosingServer:
    """Answers each request with a streamed chat completion on a connection of its own, then closes
    that connection `linger` seconds later (0: at once, before reading anything more); with
    `answer=False` it closes each connection as soon as a request arrives, without an answer."""

    def __init__(self, linger: float, answer: bool = True) -> None:
        self.linger, self.answer = linger, answer
        self.connections = 0
        self.answered = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            await reader.readexactly(length)
            if self.answer:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                for delta in CHUNKS:
                    writer.write(_chunked(_event(delta)))
                writer.write(_chunked(_event({}, "stop")) + _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
                await writer.drain()
                self.answered += 1
                await asyncio.sleep(self.linger)  # the next request may come in meanwhile, unread
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()


async def _probe_many(url: str, count: int) -> list[str]:
    client = make_client(url, None, 10.0)
    outcomes = []
    try:
        for i in range(count):
            request = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 4}
            outcomes.append(judge(await observe_stream(client, request, 10.0, time.perf_counter)).outcome)
    finally:
        await client.close()
    return outcomes


def test_a_request_sent_on_a_connection_the_server_is_closing_goes_again() -> None:
    async def scenario() -> tuple[list[str], ClosingServer]:
        server = ClosingServer(linger=0.2)  # the next request always comes before the close
        async with server as url:
            return await _probe_many(url, 6), server

    outcomes, server = asyncio.run(scenario())
    assert outcomes == ["ok"] * 6
    assert server.answered == 6 and server.connections >= 6  # each answer on a connection of its own


@pytest.mark.parametrize("linger", [0.0, 0.2])
def test_a_server_that_never_answers_still_fails(linger: float) -> None:
    async def scenario() -> tuple[list[str], ClosingServer]:
        server = ClosingServer(linger=linger, answer=False)
        async with server as url:
            return await _probe_many(url, 3), server

    outcomes, server = asyncio.run(scenario())
    assert outcomes == ["connection_error"] * 3
    assert server.connections == 6  # each probe tried twice: its own try and one more, no more
