"""Each probe asks a prompt the engine has not seen: a nonce at its start, so no prefix cache answers
it. Checked on a real loopback server speaking the OpenAI streaming API, through the real SDK."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from monitor.canary.probe import Prober, probe_prompt
from monitor.config import load_settings
from tests.support.appserver import serve_asgi

PROMPT = "Say hello in five words."


def recording_app(seen: list[str], lock: threading.Lock) -> FastAPI:
    """Streams a fixed two-token answer and records every prompt it was asked."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        with lock:
            seen.append(body["messages"][0]["content"])

        async def events() -> AsyncIterator[bytes]:
            for piece, finish in (("Hello", None), (" there", "stop")):
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": body["model"],
                         "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": finish}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    with serve_asgi(recording_app(seen, threading.Lock())) as url:
        yield f"{url}/v1", seen


def probes_asked(base_url: str, count: int, **extra: Any) -> None:
    probe = load_settings(None, {"canary": {"probes": [
        {"name": "p", "base_url": base_url, "model": "m", "prompt": PROMPT, **extra}]}}).canary.probes[0]

    async def run() -> None:
        prober = Prober(probe, "infermon-canary")
        try:
            for _ in range(count):
                observed = await prober.run()
                assert observed.failure is None and observed.text == "Hello there"
        finally:
            await prober.aclose()

    asyncio.run(run())


def test_every_probe_starts_with_a_new_nonce(server: tuple[str, list[str]]) -> None:
    base_url, seen = server
    probes_asked(base_url, 5)
    assert len(seen) == 5 and len(set(seen)) == 5  # no two probes share a prompt
    for prompt in seen:
        assert re.fullmatch(r"\[[0-9a-f]{8}\] " + re.escape(PROMPT), prompt)  # the nonce leads: the prefix differs


def test_nonce_off_sends_the_prompt_as_written(server: tuple[str, list[str]]) -> None:
    base_url, seen = server
    probes_asked(base_url, 2, nonce=False)
    assert seen == [PROMPT, PROMPT]


def test_probe_prompt_is_short() -> None:
    probe = load_settings(None, {"canary": {"probes": [
        {"name": "p", "base_url": "http://127.0.0.1:9/v1", "model": "m"}]}}).canary.probes[0]
    assert len(probe_prompt(probe)) - len(probe.prompt) == len("[0123abcd] ")  # a few tokens, not a new workload
