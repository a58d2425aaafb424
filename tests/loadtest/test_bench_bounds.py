"""`infermon bench` is bounded in bytes and time.

A loopback server on the test's own event loop streams what a broken or hostile server would:
deltas forever, one SSE event that never ends, an endless error body, a 200 MB Content-Length,
a gzip bomb, a /version that drips a byte at a time, a /v1/models that never ends or lists a
thousand long ids. Every run has `--timeout` 60 s, far past the test's DEADLINE_S, so only a cap
(or a probe's deadline) can end it in time: the client before these caps kept every byte until
that timeout, or hung in a probe before any load.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from monitor.canary.outcome import judge
from monitor.canary.probe import observe_stream
from monitor.cli import app
from monitor.config import CostSettings
from monitor.cost.prices import PriceBook
from monitor.loadtest.bounded import counting, parse_size
from monitor.loadtest.conditions import MODELS_KEPT, TEXT_CHARS
from monitor.loadtest.data import load_dataset
from monitor.loadtest.load import CLIENTS, Level, make_client
from monitor.loadtest.run import BenchConfig, run_bench
from monitor.loadtest.sampling import DcgmSource, open_source
from monitor.loadtest.scenario import BUILT_IN
from tests.loadtest.conftest import MODEL

DEADLINE_S = 15.0  # a whole run here; each bound below ends it in about a second
TIMEOUT_S = 60.0  # the runs' --timeout
CHAT = "/v1/chat/completions"
SSE = "text/event-stream"

Handler = Callable[[asyncio.StreamWriter], Awaitable[None]]


def _event(delta: dict[str, str], finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(body)}\n\n".encode()


def _head(writer: asyncio.StreamWriter, status: int = 200, content_type: str = SSE, **headers: str) -> None:
    lines = [f"HTTP/1.1 {status} Status", f"Content-Type: {content_type}", "Connection: close"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())


async def _forever(writer: asyncio.StreamWriter, piece: bytes, pause_s: float) -> None:
    """`piece` every `pause_s` until the client goes away (drain raises) or the test ends."""
    while True:
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(pause_s)


async def good_answer(writer: asyncio.StreamWriter) -> None:
    _head(writer)
    for delta in ({"role": "assistant", "content": ""}, {"content": "Paris"}, {"content": " it is"}):
        writer.write(_event(delta))
    usage = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": MODEL, "choices": [],
             "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}
    writer.write(_event({}, "stop") + f"data: {json.dumps(usage)}\n\n".encode() + b"data: [DONE]\n\n")
    await writer.drain()


async def not_found(writer: asyncio.StreamWriter) -> None:
    _head(writer, 404, "text/plain", Content_Length="10")
    writer.write(b"not found\n")
    await writer.drain()


async def deltas_forever(writer: asyncio.StreamWriter) -> None:
    _head(writer)
    await _forever(writer, _event({"content": "x" * 65536}), 0.005)


async def one_endless_event(writer: asyncio.StreamWriter) -> None:
    _head(writer)
    writer.write(b'data: {"id": "c", "object": "chat.completion.chunk", "choices": [{"delta": {"content": "')
    await _forever(writer, b"x" * 4096, 0.002)


async def error_forever(writer: asyncio.StreamWriter) -> None:
    _head(writer, 500, "application/json")
    writer.write(b'{"error": {"message": "out of memory", "padding": "')
    await _forever(writer, b"x" * 4096, 0.005)


async def declares_200_mb(writer: asyncio.StreamWriter) -> None:
    _head(writer, Content_Length="200000000")
    writer.write(_event({"role": "assistant", "content": ""}))
    await writer.drain()
    await asyncio.sleep(3600)  # the rest never comes


async def drips_comments(writer: asyncio.StreamWriter) -> None:
    _head(writer)
    await _forever(writer, b": still here\n\n", 0.1)


@functools.cache
def _gzip_bomb(decoded_mb: int) -> bytes:
    """`decoded_mb` MB of deltas (no finish) in a gzip stream of a few tens of KB."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    piece = _event({"content": "x" * 1000}) * 1000  # ~1.1 MB
    return b"".join(packer.compress(piece) for _ in range(decoded_mb)) + packer.flush()


async def gzip_bomb(writer: asyncio.StreamWriter) -> None:
    body = _gzip_bomb(20)
    _head(writer, Content_Encoding="gzip", Content_Length=str(len(body)))
    writer.write(body)
    await writer.drain()


async def drips(writer: asyncio.StreamWriter) -> None:
    _head(writer, content_type="application/json")
    await _forever(writer, b" ", 0.1)


async def models_forever(writer: asyncio.StreamWriter) -> None:
    _head(writer, content_type="application/json")
    writer.write(b'{"object": "list", "data": [')
    card = json.dumps({"id": "m" * 200, "object": "model", "max_model_len": 4096}).encode() + b", "
    await _forever(writer, card * 64, 0.002)


async def thousand_long_models(writer: asyncio.StreamWriter) -> None:
    cards = [{"id": f"{i:04d}-" + "m" * 1000, "object": "model", "max_model_len": 4096} for i in range(1000)]
    body = json.dumps({"object": "list", "data": cards}).encode()
    _head(writer, content_type="application/json", Content_Length=str(len(body)))
    writer.write(body)
    await writer.drain()


class Server:
    """HTTP/1.1 on loopback, one request per connection (`Connection: close`); each path is
    answered by a handler that writes what it likes. Handlers still running at the end are
    cancelled."""

    def __init__(self, routes: dict[str, Handler]) -> None:
        self.routes: dict[str, Handler] = {CHAT: good_answer, **routes}
        self.chat_headers: list[dict[str, str]] = []
        self._handlers: set[asyncio.Task[Any]] = set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1].split("?")[0]
            headers = {name.strip().lower(): value.strip()
                       for name, _, value in (line.partition(":") for line in lines[1:] if line)}
            await reader.readexactly(int(headers.get("content-length", "0")))
            if path == CHAT:
                self.chat_headers.append(headers)
            await self.routes.get(path, not_found)(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client ended the answer: what the caps are for
        except asyncio.CancelledError:
            pass  # the test is over (__aexit__); a cancelled handler would be logged as an error
        finally:
            writer.close()
            self._handlers.discard(task)

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self.server.wait_closed()


def bench_against(routes: dict[str, Handler], prompts: Path, **options: Any) -> tuple[dict[str, Any], Server]:
    """One short run (c=2, 0.3 s, no warm-up) against a Server with `routes`, within DEADLINE_S (`client=`:
    the bench's own client, or the SDK's: each is bounded the same)."""
    options = {"duration_s": 0.3, "repeats": 1, "warmup": 0, "timeout_s": TIMEOUT_S, **options}

    async def go() -> tuple[dict[str, Any], Server]:
        server = Server(routes)
        async with server as url:
            config = BenchConfig(target=url, model=MODEL, scenario=BUILT_IN["chat"], dataset=load_dataset(prompts),
                                 levels=[Level("concurrency", 2)], **options)
            async with asyncio.timeout(DEADLINE_S):
                return await run_bench(config, None, PriceBook(CostSettings())), server

    return asyncio.run(go())


def _window(result: dict[str, Any]) -> dict[str, Any]:
    window: dict[str, Any] = result["levels"][0]["repeats"][0]
    return window


# -- each request: bytes and time -----------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_endless_large_deltas_end_at_the_response_cap(prompts: Path, client: str) -> None:
    # The 1,377 MB in 20 s at c=2: every 64 KB delta kept until the 10-min timeout.
    result, _ = bench_against({CHAT: deltas_forever}, prompts, client=client, max_response_bytes=1 << 20)
    window = _window(result)
    assert set(window["outcomes"]) == {"too_large"} and window["outcomes"]["too_large"] >= 2
    assert window["failure_reasons"] == {"too_large": ["response too large: more than 1 MiB"]}


def test_a_request_keeps_at_most_its_cap(prompts: Path) -> None:
    """The client's own tally: what it handed to the SDK stops below the cap, while the server
    goes on streaming."""

    async def go() -> tuple[str, int, str | None]:
        async with Server({CHAT: deltas_forever}) as url:
            client = make_client(f"{url}/v1", None, TIMEOUT_S)
            request = {"model": MODEL, "messages": [{"role": "user", "content": "q"}], "max_tokens": 4}
            try:
                async with asyncio.timeout(DEADLINE_S):
                    with counting(limit=512 * 1024) as kept:
                        seen = await observe_stream(client, request, TIMEOUT_S, time.perf_counter)
            finally:
                await client.close()
            return judge(seen).outcome, kept.bytes, kept.too_large

    outcome, kept_bytes, reason = asyncio.run(go())
    assert 0 < kept_bytes <= 512 * 1024
    assert reason == "response too large: more than 512 KiB"
    assert outcome == "bad_response"  # what the canary's judge calls it; the bench says too_large


@pytest.mark.parametrize("client", CLIENTS)
def test_one_endless_sse_event_ends_at_the_event_cap(prompts: Path, client: str) -> None:
    result, _ = bench_against({CHAT: one_endless_event}, prompts, client=client, max_event_bytes=32 * 1024)
    window = _window(result)
    assert set(window["outcomes"]) == {"too_large"}
    assert window["failure_reasons"] == {"too_large": ["response too large: one SSE event of more than 32 KiB"]}


@pytest.mark.parametrize("client", CLIENTS)
def test_an_endless_error_body_is_read_only_for_its_reason(prompts: Path, client: str) -> None:
    # The HTTP 500 with a 200 MB body (1,548 MB): the SDK read all of it for the message.
    result, _ = bench_against({CHAT: error_forever}, prompts, client=client, max_error_bytes=16 * 1024)
    window = _window(result)
    assert set(window["outcomes"]) == {"http_5xx"} and window["outcomes"]["http_5xx"] >= 2
    assert all(reason.startswith("HTTP 500") for reason in window["failure_reasons"]["http_5xx"])


@pytest.mark.parametrize("client", CLIENTS)
def test_a_declared_length_past_the_cap_fails_before_the_body(prompts: Path, client: str) -> None:
    result, _ = bench_against({CHAT: declares_200_mb}, prompts, client=client)
    window = _window(result)
    assert set(window["outcomes"]) == {"too_large"}
    assert window["failure_reasons"] == {
        "too_large": ["response too large: 200000000 bytes declared, more than 4 MiB"]}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_gzip_bomb_is_refused_unread(prompts: Path, client: str) -> None:
    result, server = bench_against({CHAT: gzip_bomb}, prompts, client=client)
    window = _window(result)
    assert set(window["outcomes"]) == {"bad_response"}
    (reason,) = window["failure_reasons"]["bad_response"]
    assert "compressed (gzip) although identity was asked for" in reason
    assert {h.get("accept-encoding") for h in server.chat_headers} == {"identity"}


@pytest.mark.parametrize("client", CLIENTS)
def test_the_timeout_is_the_whole_request_not_one_read(prompts: Path, client: str) -> None:
    # A byte every 0.1 s never trips a per-read timeout; the request's deadline is the whole of it.
    # (The load already ran under one deadline; this holds it there.)
    result, _ = bench_against({CHAT: drips_comments}, prompts, client=client, timeout_s=1.0)
    window = _window(result)
    assert set(window["outcomes"]) == {"timeout"}
    assert window["failure_reasons"] == {"timeout": ["no complete answer within 1s"]}


# -- the conditions probes ------------------------------------------------------------------------


def test_dripping_probes_cost_their_deadline_and_the_run_goes_on(prompts: Path) -> None:
    # The issue's /version dripping a byte every 2 s: the run hung before any load, silently.
    result, _ = bench_against({"/version": drips, "/metrics": drips}, prompts, probe_timeout_s=0.5)
    server = result["conditions"]["server"]
    assert server["version"] is None and server["engine"] is None  # not observed ...
    assert server["errors"]["version"] == "timed out after 0.5s"  # ... and why
    assert server["errors"]["metrics"] == "timed out after 0.5s"
    assert server["errors"]["models"] == "HTTP 404"
    window = _window(result)
    assert set(window["outcomes"]) == {"ok"} and window["requests"] >= 2


def test_an_endless_model_list_is_cut_at_the_probe_cap(prompts: Path) -> None:
    result, _ = bench_against({"/v1/models": models_forever}, prompts, probe_max_bytes=256 * 1024)
    server = result["conditions"]["server"]
    assert server["models"] == [] and server["models_count"] is None and server["max_model_len"] is None
    assert server["errors"]["models"] == "page larger than 262144 bytes"
    assert set(_window(result)["outcomes"]) == {"ok"}


def test_a_result_records_a_bounded_model_list(prompts: Path) -> None:
    # The 200 MB /v1/models became a 201 MB result: every id copied into it.
    result, _ = bench_against({"/v1/models": thousand_long_models}, prompts)
    server = result["conditions"]["server"]
    assert len(server["models"]) == MODELS_KEPT
    assert all(len(model) == TEXT_CHARS for model in server["models"])
    assert server["models_count"] == 1000
    assert server["models"][0].startswith("0000-") and server["max_model_len"] == 4096
    assert len(json.dumps(result)) < 64 * 1024
    assert "models" not in server["errors"]


def test_a_dripping_dcgm_page_costs_its_deadline() -> None:
    async def go() -> tuple[object, dict[str, Any]]:
        async with Server({"/dcgm": drips}) as url, httpx.AsyncClient() as http:
            async with asyncio.timeout(DEADLINE_S):
                return await open_source(DcgmSource(f"{url}/dcgm", http, timeout_s=0.5))

    source, conditions = asyncio.run(go())
    assert source is None and conditions == {"source": "dcgm", "error": "timed out after 0.5s"}


def test_sizes_read_as_the_cli_writes_them() -> None:
    assert parse_size("8MiB") == 8 << 20 and parse_size("500kB") == 500_000 and parse_size("1048576") == 1 << 20
    for wrong in ("0", "-1", "8 MB/s", "lots"):
        with pytest.raises(ValueError):
            parse_size(wrong)
    base = ["bench", "run", "--target", "http://127.0.0.1:9", "--model", MODEL, "--synthetic"]
    bad = CliRunner().invoke(app, [*base, "--max-response", "lots"])
    assert bad.exit_code == 2 and "--max-response: a positive size" in bad.output
    bad = CliRunner().invoke(app, [*base, "--probe-timeout", "soon"])
    assert bad.exit_code == 2 and "--probe-timeout: not a duration" in bad.output
