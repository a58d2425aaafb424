"""The bench's own streaming client (monitor/loadtest/stream.py) reads what the openai SDK reads.

Against the simulator it records the same answer as the canary's SDK path; fed a chunked stream
cut at any byte it records the same; every way an answer can fail gets the SDK path's outcome and
a reason that says what happened (a JSON error's message, a redirect's target, never the key); a
kept connection is reused, and one the server was closing is tried once more; HTTPS is verified
against the system's trust store (SSL_CERT_FILE); a proxy in the environment takes the SDK path.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import trustme
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.canary.outcome import Observed, judge
from monitor.canary.probe import observe_stream
from monitor.loadtest.bounded import Caps
from monitor.loadtest.load import SdkSender, StreamSender, make_client, make_sender
from monitor.loadtest.stream import StreamClient
from monitor.sim import LatencyProfile
from tests.canary.test_closing_server import ClosingServer
from tests.loadtest.conftest import MODEL

PROFILE = LatencyProfile(prefill_s=0.05, prefill_per_token_s=0.0, per_token_s=0.003, output_tokens=(12, 12),
                         jitter=0.0)
BODY: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "tell me about rivers"}],
                        "max_tokens": 12}
KEY = "sk-test-0123456789abcdef"


def _event(delta: dict[str, str], finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


USAGE = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": MODEL, "choices": [],
         "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
EVENTS = [_event({"role": "assistant", "content": ""}), _event({"content": "Paris"}), _event({"content": " is"}),
          _event({"content": " it"}), _event({}, "stop"), f"data: {json.dumps(USAGE)}\n\n".encode(),
          b"data: [DONE]\n\n"]


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
GOOD = SSE_HEAD + b"".join(_chunked(e) for e in EVENTS) + b"0\r\n\r\n"


def _answer(status: int, body: bytes, content_type: str = "application/json", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status} Status", f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class Scripted:
    """HTTP/1.1 on loopback that reads each request whole (head and Content-Length body) and writes
    `answer(n)` for the n-th request it got (0 first): bytes, or a list of pieces written with a
    drain between; None closes the connection unanswered. `close_after`: close once answered."""

    def __init__(self, answer: Callable[[int], bytes | Sequence[bytes] | None], close_after: bool = False) -> None:
        self.answer, self.close_after = answer, close_after
        self.connections = 0
        self.heads: list[dict[str, str]] = []
        self.bodies: list[dict[str, Any]] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                head = {n.strip().lower(): v.strip() for n, _, v in (line.partition(":") for line in lines[1:] if line)}
                self.heads.append(head)
                self.bodies.append(json.loads(await reader.readexactly(int(head.get("content-length", "0")))))
                answer = self.answer(len(self.heads) - 1)
                if answer is None:
                    break
                for piece in [answer] if isinstance(answer, bytes) else answer:
                    writer.write(piece)
                    await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client went away: what several tests are about
        except asyncio.CancelledError:
            return  # the test is over: a cancelled handler would be logged as an error
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()


def _observe(answer: Callable[[int], bytes | Sequence[bytes] | None], count: int = 1, *, key: str | None = None,
             close_after: bool = False, **options: Any) -> tuple[list[Observed], Scripted]:
    async def go() -> tuple[list[Observed], Scripted]:
        server = Scripted(answer, close_after)
        async with server as url:
            client = StreamClient(url, key, options.pop("timeout_s", 10.0), **options)
            try:
                seen = [(await client.observe(BODY))[0] for _ in range(count)]
            finally:
                await client.close()
        return seen, server

    return asyncio.run(go())


# -- what it records ------------------------------------------------------------------------------


def test_the_stream_client_records_what_the_sdk_does(start_sim) -> None:
    server = start_sim(PROFILE)

    async def both() -> tuple[Observed, Observed]:
        stream = StreamClient(f"{server.url}/v1", None, 10.0)
        sdk = make_client(f"{server.url}/v1", None, 10.0)
        try:
            return (await stream.observe(BODY))[0], await observe_stream(sdk, BODY, 10.0, time.perf_counter)
        finally:
            await stream.close()
            await sdk.close()

    fast, slow = asyncio.run(both())
    for name in ("status", "text", "usage_tokens", "usage_prompt_tokens", "finish_reason", "failure"):
        assert getattr(fast, name) == getattr(slow, name), name
    assert fast.usage_tokens == 12 and fast.failure is None and fast.status == 200
    # Timed from the send: the first token comes after the simulator's 50 ms prefill, the stream
    # ends after its last token.
    assert fast.first_content_s is not None and fast.last_content_s is not None and fast.ended_s is not None
    assert 0.05 <= fast.first_content_s <= fast.last_content_s <= fast.ended_s
    assert judge(fast).outcome == "ok"


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(GOOD)), max_size=10))
@settings(max_examples=60, deadline=None)
def test_a_stream_cut_at_any_byte_reads_the_same(cuts: list[int]) -> None:
    edges = [0, *sorted(cuts), len(GOOD)]
    pieces = [GOOD[a:b] for a, b in itertools.pairwise(edges) if b > a]
    (seen,), _ = _observe(lambda n: pieces)
    assert (seen.text, seen.usage_tokens, seen.usage_prompt_tokens, seen.finish_reason) == ("Paris is it", 3, 5, "stop")
    assert seen.content_chunks == 3 and seen.failure is None and judge(seen).outcome == "ok"


def test_the_request_is_the_sdks_with_the_bench_marks(start_sim) -> None:
    (seen,), server = _observe(lambda n: GOOD, key=KEY, headers={"X-Infermon-Bench": "1"})
    head, body = server.heads[0], server.bodies[0]
    assert head["authorization"] == f"Bearer {KEY}" and head["x-infermon-bench"] == "1"
    assert head["accept-encoding"] == "identity" and head["content-type"] == "application/json"
    assert body == {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    assert seen.failure is None


def test_an_ipv6_target_is_reached_and_named_in_brackets() -> None:
    async def go() -> tuple[Observed, dict[str, str]]:
        heads: list[dict[str, str]] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            fields = (line.partition(":") for line in head[1:] if line)
            heads.append({name.strip().lower(): value.strip() for name, _, value in fields})
            await reader.readexactly(int(heads[-1]["content-length"]))
            writer.write(GOOD)
            await writer.drain()
            writer.close()

        try:
            server = await asyncio.start_server(serve, "::1", 0)
        except OSError:
            pytest.skip("no IPv6 loopback here")
        async with server:
            port = server.sockets[0].getsockname()[1]
            client = StreamClient(f"http://[::1]:{port}/v1", None, 5.0)
            try:
                return (await client.observe(BODY))[0], {**heads[0], "port": str(port)}
            finally:
                await client.close()

    seen, head = asyncio.run(go())
    assert judge(seen).outcome == "ok" and head["host"] == f"[::1]:{head['port']}"


def test_a_key_with_a_line_break_is_refused_without_showing_it() -> None:
    with pytest.raises(ValueError, match="line break") as raised:
        StreamClient("http://127.0.0.1:1/v1", "sk-a\r\nX-Evil: 1", 1.0)
    assert "sk-a" not in str(raised.value)


# -- connections ----------------------------------------------------------------------------------


def test_a_kept_connection_carries_every_request() -> None:
    seen, server = _observe(lambda n: GOOD, count=5)
    assert [judge(s).outcome for s in seen] == ["ok"] * 5
    assert server.connections == 1


def test_a_connection_the_server_closes_after_each_answer_is_not_reused() -> None:
    seen, server = _observe(lambda n: GOOD, count=3, close_after=True)
    assert [judge(s).outcome for s in seen] == ["ok"] * 3
    assert server.connections == 3


def test_a_request_sent_on_a_connection_the_server_is_closing_goes_again() -> None:
    async def go(linger: float, answer: bool) -> tuple[list[str], ClosingServer]:
        server = ClosingServer(linger=linger, answer=answer)
        async with server as url:
            client = StreamClient(url, None, 10.0)
            try:
                return [judge((await client.observe(BODY))[0]).outcome for _ in range(4)], server
            finally:
                await client.close()

    outcomes, server = asyncio.run(go(0.2, True))  # the next request always comes before the close
    assert outcomes == ["ok"] * 4 and server.answered == 4
    outcomes, server = asyncio.run(go(0.0, False))  # a server that breaks every connection still fails
    assert outcomes == ["connection_error"] * 4
    assert server.connections == 8  # each request tried twice: its own try and one more, no more


def test_a_body_that_runs_to_the_close_is_complete() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    seen, server = _observe(lambda n: [head, *EVENTS], count=2, close_after=True)
    assert [judge(s).outcome for s in seen] == ["ok"] * 2 and seen[0].text == "Paris is it"
    assert server.connections == 2


# -- failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "outcome", "detail"), [
    (_answer(404, json.dumps({"error": {"message": "The model `x` does not exist.", "code": 404}}).encode()),
     "http_4xx", "HTTP 404: The model `x` does not exist."),
    (_answer(503, b"upstream overloaded\nmore", "text/plain"), "http_5xx", "HTTP 503: upstream overloaded"),
    (_answer(429, json.dumps({"message": "slow down"}).encode()), "rate_limited", "HTTP 429: slow down"),
    (_answer(307, b"", Location="https://user:pw@other.example/v1/chat/completions"), "bad_response",
     "HTTP 307: the server redirects to https://other.example/v1/chat/completions: give that as the target"),
    (SSE_HEAD + _chunked(EVENTS[1]) + _chunked(b'data: {"error": {"message": "out of KV cache"}}\n\n') + b"0\r\n\r\n",
     "bad_response", "APIError: out of KV cache"),
    (SSE_HEAD + _chunked(b"data: {not json\n\n") + b"0\r\n\r\n", "bad_response", "JSONDecodeError"),
    (SSE_HEAD + _chunked(b'data: {"choices": "none"}\n\n') + b"0\r\n\r\n", "bad_response",
     "not a chat-completion chunk"),
])
def test_a_failed_answer_says_why(answer: bytes, outcome: str, detail: str) -> None:
    (seen,), _ = _observe(lambda n: answer)
    result = judge(seen)
    assert result.outcome == outcome, result
    assert detail in result.detail, result.detail
    assert "pw" not in result.detail


def test_a_stream_broken_midway_is_a_broken_stream() -> None:
    (seen,), _ = _observe(lambda n: SSE_HEAD + _chunked(EVENTS[0]) + _chunked(EVENTS[1]), close_after=True)
    assert judge(seen).outcome == "broken_stream" and seen.text == "Paris"


def test_a_refused_connection_and_a_deadline() -> None:
    async def refused() -> Observed:
        client = StreamClient("http://127.0.0.1:9/v1", None, 5.0)
        return (await client.observe(BODY))[0]

    result = judge(asyncio.run(refused()))
    assert result.outcome == "refused" and "onnect" in result.detail

    (seen,), _ = _observe(lambda n: [SSE_HEAD, _chunked(EVENTS[0])], timeout_s=0.5)  # then nothing more
    assert judge(seen).outcome == "timeout" and seen.detail == "no complete answer within 0.5s"


def test_an_error_answer_never_shows_the_key() -> None:
    echo = _answer(401, json.dumps({"error": {"message": f"bad key {KEY}"}}).encode())
    (seen,), _ = _observe(lambda n: echo, key=KEY)
    assert judge(seen).outcome == "http_4xx" and KEY not in seen.detail and "<secret>" in seen.detail


def test_an_endless_error_body_is_read_only_for_its_reason() -> None:
    pieces = [b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
              *(_chunked(b"x" * 4096) for _ in range(64))]
    (seen,), _ = _observe(lambda n: pieces, caps=Caps(error_bytes=8192))
    assert judge(seen).outcome == "http_5xx" and seen.detail.startswith("HTTP 500: xxxx")


# -- HTTPS and proxies ----------------------------------------------------------------------------


def test_https_is_verified_against_the_systems_trust(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server_tls)

    async def go() -> Observed:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                writer.write(GOOD)
                await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
                return  # the untrusted client refused the handshake: what the first half tests
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_tls)
        async with server:
            client = StreamClient(f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1", None, 5.0)
            try:
                return (await client.observe(BODY))[0]
            finally:
                await client.close()

    untrusted = judge(asyncio.run(go()))
    assert untrusted.outcome == "refused" and "CERTIFICATE_VERIFY_FAILED" in untrusted.detail
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert judge(asyncio.run(go())).outcome == "ok"


def test_a_proxy_in_the_environment_takes_the_sdk_path(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                 "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)

    def made(url: str) -> tuple[Any, str | None]:
        sender, why = make_sender("stream", url, None, 5.0)
        asyncio.run(sender.close())
        return sender, why

    sender, why = made("http://10.1.2.3:8000/v1")
    assert isinstance(sender, StreamSender) and why is None
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:3128")
    sender, why = made("http://10.1.2.3:8000/v1")
    assert isinstance(sender, SdkSender) and why is not None and "HTTP_PROXY" in why
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    sender, why = made("http://10.1.2.3:8000/v1")
    assert isinstance(sender, StreamSender) and why is None
    with pytest.raises(ValueError, match="stream, openai"):
        make_sender("aiohttp", "http://10.1.2.3:8000/v1", None, 5.0)
