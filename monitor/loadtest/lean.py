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

from monitor.canary.probe import Recording

Choice = tuple[bool, str | None, str | None]  # (has a delta, its content, the finish reason)


def plain_chunk(data: Any) -> tuple[list[Choice], dict[str, Any] | None] | None:
    """A chunk's JSON -> its choices and usage, or None when it is not a plain chunk: a dict whose
    `choices` is a list of dicts with a dict (or no) `delta` whose `content` is text (or none), and
    whose `usage` is a dict (or none)."""
    if not isinstance(data, dict):
        return None
    choices, usage = data.get("choices", []), data.get("usage")
    if not isinstance(choices, list) or not (usage is None or isinstance(usage, dict)):
        return None
    made: list[Choice] = []
    for choice in choices:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not (delta is None or isinstance(delta, dict)):
            return None
        content = delta.get("content") if delta is not None else None
        if not (content is None or isinstance(content, str)):
            return None
        made.append((delta is not None, content, choice.get("finish_reason")))
    return made, usage


def lean_chunk(data: Any) -> SimpleNamespace | None:
    """A chunk's JSON -> an object with .choices[i].delta.content / .finish_reason and .usage,
    or None when the JSON is not a plain chunk (then the SDK builds it)."""
    plain = plain_chunk(data)
    if plain is None:
        return None
    choices, usage = plain
    made = [SimpleNamespace(delta=SimpleNamespace(content=content) if has_delta else None, finish_reason=finish)
            for has_delta, content, finish in choices]
    lean_usage = None if usage is None else SimpleNamespace(
        completion_tokens=usage.get("completion_tokens"), prompt_tokens=usage.get("prompt_tokens"))
    return SimpleNamespace(choices=made, usage=lean_usage)


def record_chunk(seen: Recording, data: Any, at: float) -> bool:
    """A chunk's JSON recorded on `seen` straight from the dict (the bench's own client, stream.py);
    False when it is not a plain chunk (then the answer is not a chat stream)."""
    plain = plain_chunk(data)
    if plain is None:
        return False
    choices, usage = plain
    if usage is not None:
        seen.add_usage(usage.get("completion_tokens"), usage.get("prompt_tokens"))
    for _, content, finish in choices:
        seen.add_choice(content, finish, at)
    return True


class LeanSSEDecoder(SSEDecoder):
    """The SDK's SSE decoder, a block at a time: the stream's bytes are cut at blank lines with
    bytes.split, and an event that is one `data: ` line (every chunk of an engine's stream) is made
    at once; any other block goes line by line through the SDK's own `decode`, so comments,
    `event:`/`id:`/`retry:` fields and multi-line data mean what they mean to the SDK. Line ends
    are CRLF, CR or LF as in the SSE spec: a CR a chunk ends with waits for the next chunk."""

    def __init__(self) -> None:
        super().__init__()
        self._pending = b""

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[ServerSentEvent]:
        try:
            async for chunk in iterator:
                for sse in self.feed(chunk):
                    yield sse
            self.close()
        finally:
            self._pending = b""
            self._reset()

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events `chunk` completes, with what came before it."""
        return [sse for block in self._blocks(chunk) for sse in self._block(block)]

    def feed_data(self, chunk: bytes) -> list[bytes | ServerSentEvent]:
        """`feed` for the bench's own client (stream.py), as the bytes arrive: an event that is one
        `data: ` line (every chunk of an engine's stream) is its data's bytes, as they came; any
        other is the SDK's event, as `feed` makes it."""
        out: list[bytes | ServerSentEvent] = []
        for block in self._blocks(chunk):
            if block.startswith(b"data: ") and b"\n" not in block and not self._data and self._event is None:
                out.append(block[6:])
            else:
                out.extend(self._block(block))
        return out

    def _blocks(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk
        if b"\r" in data:
            held = data.endswith(b"\r")  # perhaps the first half of a CRLF
            body = (data[:-1] if held else data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            data = body + (b"\r" if held else b"")
        *blocks, self._pending = data.split(b"\n\n")
        return blocks

    @property
    def pending_bytes(self) -> int:
        """The bytes of the event not yet ended by a blank line."""
        return len(self._pending)

    def close(self) -> None:
        """The stream ended: an event never closed by a blank line is read, not sent (as the SDK)."""
        for line in self._pending.rstrip(b"\r").split(b"\n"):
            self.decode(line.decode("utf-8"))
        self._pending = b""

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
