"""The openai SDK, less its per-chunk model building: the bench client's largest CPU cost.

The SDK turns every streamed chunk into a `ChatCompletionChunk` through its lenient
`construct_type`, walking the model's fields and type hints; at 64 tokens an answer that was
about half of the client's CPU time per request (a profile of `bench/bench_overhead.py`), and a
client short of CPU reads the server as slower than it is. The bench reads four things of a
chunk (what `monitor.canary.probe` records: the content delta, the finish reason, the usage
counts), so a well-formed chunk is made into plain attribute objects holding just the JSON it
came as; anything else (an error, an unexpected shape) goes the SDK's own way, unchanged.

The hook is the SDK client's `_process_response_data(data=, cast_to=, response=)`, which its
`AsyncStream` calls for every event; tests/loadtest/test_lean.py fails if a new SDK drops it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import openai
from openai._streaming import ServerSentEvent, SSEDecoder
from openai.types.chat import ChatCompletionChunk


def lean_chunk(data: Any) -> SimpleNamespace | None:
    """A chunk's JSON -> an object with .choices[i].delta.content / .finish_reason and .usage,
    or None when the JSON is not a plain chunk (then the SDK builds it)."""
    if not isinstance(data, dict):
        return None
    choices, usage = data.get("choices", []), data.get("usage")
    if not isinstance(choices, list) or not (usage is None or isinstance(usage, dict)):
        return None
    made = []
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not (delta is None or isinstance(delta, dict)):
            return None
        content = delta.get("content") if delta is not None else None
        if not (content is None or isinstance(content, str)):
            return None
        made.append(SimpleNamespace(delta=None if delta is None else SimpleNamespace(content=content),
                                    finish_reason=choice.get("finish_reason")))
    lean_usage = None if usage is None else SimpleNamespace(
        completion_tokens=usage.get("completion_tokens"), prompt_tokens=usage.get("prompt_tokens"))
    return SimpleNamespace(choices=made, usage=lean_usage)


class LeanSSEDecoder(SSEDecoder):
    """The SDK's SSE decoder, a block at a time: the stream's bytes are cut at blank lines with
    bytes.split, and an event that is one `data: ` line (every chunk of an engine's stream) is made
    at once; any other block goes line by line through the SDK's own `decode`, so comments,
    `event:`/`id:`/`retry:` fields and multi-line data mean what they mean to the SDK. Line ends
    are CRLF, CR or LF as in the SSE spec: a CR a chunk ends with waits for the next chunk."""

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[ServerSentEvent]:
        pending = b""
        try:
            async for chunk in iterator:
                data = pending + chunk
                if b"\r" in data:
                    held = data.endswith(b"\r")  # perhaps the first half of a CRLF
                    body = (data[:-1] if held else data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                    data = body + (b"\r" if held else b"")
                *blocks, pending = data.split(b"\n\n")
                for block in blocks:
                    for sse in self._block(block):
                        yield sse
            for line in pending.rstrip(b"\r").split(b"\n"):  # an event never closed: read, not sent (as the SDK)
                self.decode(line.decode("utf-8"))
        finally:
            self._reset()

    def _block(self, block: bytes) -> list[ServerSentEvent]:
        """The events of a block's lines and the blank line that ends it (an empty block is a blank
        line too: the SDK sends an event for it once an id was set)."""
        if block.startswith(b"data: ") and b"\n" not in block and not self._data and self._event is None:
            return [ServerSentEvent(data=block[6:].decode("utf-8"), id=self._last_event_id)]
        lines = [*(line.decode("utf-8") for line in block.split(b"\n")), ""]
        return [sse for line in lines if (sse := self.decode(line)) is not None]


class LeanAsyncOpenAI(openai.AsyncOpenAI):
    def _make_sse_decoder(self) -> LeanSSEDecoder:
        return LeanSSEDecoder()

    def _process_response_data(self, *, data: Any, cast_to: Any, response: Any) -> Any:
        if cast_to is ChatCompletionChunk:
            chunk = lean_chunk(data)
            if chunk is not None:
                return chunk
        return super()._process_response_data(data=data, cast_to=cast_to, response=response)
