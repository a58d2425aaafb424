"""The bench's SDK client skips the per-chunk model building and records exactly what the SDK's
own models would have: the same answer, usage and finish reason, against the simulator."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import openai
from hypothesis import given, settings
from hypothesis import strategies as st
from openai._streaming import SSEDecoder

from monitor.canary.probe import observe_stream
from monitor.loadtest.lean import LeanAsyncOpenAI, LeanSSEDecoder, lean_chunk
from monitor.loadtest.load import make_client
from monitor.sim import LatencyProfile
from tests.loadtest.conftest import MODEL

PROFILE = LatencyProfile(prefill_s=0.01, prefill_per_token_s=0.0, per_token_s=0.002, output_tokens=(12, 12),
                         jitter=0.0)


def test_a_plain_chunk_is_made_lean_and_anything_else_is_left_to_the_sdk() -> None:
    chunk = lean_chunk({"id": "x", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
                        "usage": None})
    assert chunk is not None and chunk.choices[0].delta.content == "hi" and chunk.usage is None
    last = lean_chunk({"choices": [], "usage": {"completion_tokens": 12, "prompt_tokens": 30}})
    assert last is not None and last.usage.completion_tokens == 12 and last.usage.prompt_tokens == 30
    assert lean_chunk({"choices": [{"delta": None, "finish_reason": "stop"}]}).choices[0].delta is None  # type: ignore[union-attr]
    for odd in ([], {"choices": "x"}, {"choices": [1]}, {"choices": [{"delta": "x"}]},
                {"choices": [{"delta": {"content": 5}}]}, {"usage": 3}):
        assert lean_chunk(odd) is None, odd


def test_the_lean_client_records_what_the_sdk_would(start_sim) -> None:
    server = start_sim(PROFILE)
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "tell me about rivers"}],
                            "max_tokens": 12}

    async def both() -> tuple[Any, Any, list[Any]]:
        lean = make_client(f"{server.url}/v1", None, 10.0)
        plain = openai.AsyncOpenAI(api_key="EMPTY", base_url=f"{server.url}/v1", max_retries=0)
        try:
            assert isinstance(lean, LeanAsyncOpenAI)
            stream = await lean.chat.completions.create(**body, stream=True, stream_options={"include_usage": True})
            chunks = [chunk async for chunk in stream]
            seen_lean = await observe_stream(lean, body, 10.0, time.perf_counter)
            seen_plain = await observe_stream(plain, body, 10.0, time.perf_counter)
        finally:
            await lean.close()
            await plain.close()
        return seen_lean, seen_plain, chunks

    seen_lean, seen_plain, chunks = asyncio.run(both())
    assert chunks and all(isinstance(c, SimpleNamespace) for c in chunks)  # the SDK's hook is still there
    # (How many chunks carried the 12 tokens is the simulator's timing: it sends what a step made
    # since the client last read, so a slower reader gets fewer, fuller chunks.)
    for name in ("text", "usage_tokens", "usage_prompt_tokens", "finish_reason", "failure"):
        assert getattr(seen_lean, name) == getattr(seen_plain, name), name
    assert seen_lean.usage_tokens == 12 and seen_lean.failure is None


# An event stream with what SSE allows and engines rarely send: comments, event/id/retry fields,
# multi-line data, empty data, CRLF and CR line ends, multi-byte characters, an unclosed last event.
SSE_STREAM = ('data: {"a": 1}\n\n: a comment\n\nevent: note\ndata: first\ndata: second\n\nid: 7\ndata: é中\n\n'
              'data:no space\r\n\r\ndata: cr\r\rretry: 5\ndata: x\n\ndata: \n\n\n\ndata: [DONE]\n\ndata: unclosed\n')


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(SSE_STREAM.encode())), max_size=12))
@settings(max_examples=200, deadline=None)
def test_the_lean_sse_decoder_yields_what_the_sdks_does_however_the_bytes_are_cut(cuts: list[int]) -> None:
    raw = SSE_STREAM.encode()
    edges = [0, *sorted(cuts), len(raw)]
    pieces = [raw[a:b] for a, b in itertools.pairwise(edges)]

    async def events(decoder: SSEDecoder) -> list[tuple[Any, ...]]:
        async def chunks() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield piece

        return [(e.event, e.data, e.id, e.retry) async for e in decoder.aiter_bytes(chunks())]

    lean, sdk = asyncio.run(events(LeanSSEDecoder())), asyncio.run(events(SSEDecoder()))
    assert lean == sdk and len(sdk) == 10
    # What the bench's own client reads (stream.py): the same events, a plain `data: ` one as its bytes
    # (its id, which the bench has no use for, is not kept).
    fast = LeanSSEDecoder()
    got = [item for piece in pieces for item in fast.feed_data(piece)]
    fast.close()
    assert [(None, item.decode(), None) if isinstance(item, bytes) else (item.event, item.data, item.retry)
            for item in got] == [(event, data, retry) for event, data, _, retry in sdk]
