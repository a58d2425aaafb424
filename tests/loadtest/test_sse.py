"""The bench's SSE decoder (monitor/loadtest/sse.py) reads an event stream as the openai SDK does,
however the bytes are cut; the SDK path (`--client openai`) is the plain SDK and records what the
bench's own client records."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import openai
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.canary.probe import observe_stream
from monitor.loadtest.load import make_client
from monitor.loadtest.sse import SSEDecoder, plain_chunk
from monitor.loadtest.stream import StreamClient
from monitor.sim import LatencyProfile
from tests.loadtest.conftest import MODEL

PROFILE = LatencyProfile(prefill_s=0.01, prefill_per_token_s=0.0, per_token_s=0.002, output_tokens=(12, 12),
                         jitter=0.0)


def test_a_plain_chunk_is_read_and_anything_else_is_not() -> None:
    assert plain_chunk({"id": "x", "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
                        "usage": None}) == ([(True, "hi", None)], None)
    assert plain_chunk({"choices": [], "usage": {"completion_tokens": 12}}) == ([], {"completion_tokens": 12})
    assert plain_chunk({"choices": [{"delta": None, "finish_reason": "stop"}]}) == ([(False, None, "stop")], None)
    for odd in ([], {"choices": "x"}, {"choices": [1]}, {"choices": [{"delta": "x"}]},
                {"choices": [{"delta": {"content": 5}}]}, {"usage": 3}):
        assert plain_chunk(odd) is None, odd


def test_the_sdk_path_and_the_stream_client_record_the_same(start_sim) -> None:
    server = start_sim(PROFILE)
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "tell me about rivers"}],
                            "max_tokens": 12}

    async def both() -> tuple[Any, Any]:
        sdk = make_client(f"{server.url}/v1", None, 10.0)
        stream = StreamClient(f"{server.url}/v1", None, 10.0)
        try:
            assert type(sdk) is openai.AsyncOpenAI  # the SDK itself: no private hook
            return await observe_stream(sdk, body, 10.0, _clock), (await stream.observe(body))[0]
        finally:
            await sdk.close()
            await stream.close()

    seen_sdk, seen_stream = asyncio.run(both())
    for name in ("text", "usage_tokens", "usage_prompt_tokens", "finish_reason", "failure"):
        assert getattr(seen_sdk, name) == getattr(seen_stream, name), name
    assert seen_sdk.usage_tokens == 12 and seen_sdk.failure is None


def _clock() -> float:
    import time

    return time.perf_counter()


# An event stream with what SSE allows and engines rarely send: comments, event/id/retry fields,
# multi-line data, empty data, CRLF and CR line ends, multi-byte characters, an unclosed last event.
SSE_STREAM = ('data: {"a": 1}\n\n: a comment\n\nevent: note\ndata: first\ndata: second\n\nid: 7\ndata: é中\n\n'
              'data:no space\r\n\r\ndata: cr\r\rretry: 5\ndata: x\n\ndata: \n\n\n\ndata: [DONE]\n\ndata: unclosed\n')


@given(cuts=st.lists(st.integers(min_value=0, max_value=len(SSE_STREAM.encode())), max_size=12))
@settings(max_examples=200, deadline=None)
def test_the_sse_decoder_yields_what_the_sdks_does_however_the_bytes_are_cut(cuts: list[int]) -> None:
    """The SDK's own decoder is the reference here (a test's oracle, never a hook of the bench's)."""
    from openai._streaming import SSEDecoder as SdkDecoder

    raw = SSE_STREAM.encode()
    edges = [0, *sorted(cuts), len(raw)]
    pieces = [raw[a:b] for a, b in itertools.pairwise(edges)]

    async def reference() -> list[tuple[Any, ...]]:
        async def chunks() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield piece

        return [(e.event, e.data, e.retry) async for e in SdkDecoder().aiter_bytes(chunks())]

    sdk = asyncio.run(reference())
    assert len(sdk) == 10
    # A plain `data: ` event comes as its bytes (its id, which the bench has no use for, is not kept).
    ours = SSEDecoder()
    got = [item for piece in pieces for item in ours.feed_data(piece)]
    ours.close()
    assert [(None, item.decode(), None) if isinstance(item, bytes) else (item.event, item.data, item.retry)
            for item in got] == sdk
