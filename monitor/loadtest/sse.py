"""An engine's event stream as the bench's own client reads it (stream.py): server-sent events cut
a block at a time as the bytes arrive, and a chat-completion chunk recorded straight from its JSON.

The SSE reading is the spec's (https://html.spec.whatwg.org/multipage/server-sent-events.html,
"event stream interpretation"), as the openai SDK reads it: comments, `event:`/`id:`/`retry:`
fields and multi-line data mean what they mean there, line ends are CRLF, CR or LF (a CR that ends
a read waits for the next one), and an event never closed by a blank line is not sent.
tests/loadtest/test_sse.py holds it to the SDK's own decoder, however the bytes are cut.
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

from monitor.canary.probe import Recording

Choice = tuple[bool, str | None, str | None]  # (has a delta, its content, the finish reason)


class Event(NamedTuple):
    event: str | None
    data: str
    id: str | None
    retry: int | None


class SSEDecoder:
    """`feed_data(bytes)` -> the events those bytes complete: one that is a single `data: ` line
    (every chunk of an engine's stream) as its data's bytes, as they came; any other as an `Event`."""

    def __init__(self) -> None:
        self._pending = b""
        self._event: str | None = None
        self._data: list[str] = []
        self._last_event_id: str | None = None
        self._retry: int | None = None

    def feed_data(self, chunk: bytes) -> list[bytes | Event]:
        out: list[bytes | Event] = []
        for block in self._blocks(chunk):
            if block.startswith(b"data: ") and b"\n" not in block and not self._data and self._event is None:
                out.append(block[6:])
            else:
                lines = [*(line.decode("utf-8") for line in block.split(b"\n")), ""]
                out.extend(event for line in lines if (event := self._line(line)) is not None)
        return out

    @property
    def pending_bytes(self) -> int:
        """The bytes of the event not yet ended by a blank line."""
        return len(self._pending)

    def close(self) -> None:
        """The stream ended: an event never closed by a blank line is read, not sent."""
        for line in self._pending.rstrip(b"\r").split(b"\n"):
            self._line(line.decode("utf-8"))
        self._pending = b""

    def _blocks(self, chunk: bytes) -> list[bytes]:
        data = self._pending + chunk
        if b"\r" in data:
            held = data.endswith(b"\r")  # perhaps the first half of a CRLF
            body = (data[:-1] if held else data).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            data = body + (b"\r" if held else b"")
        *blocks, self._pending = data.split(b"\n\n")
        return blocks

    def _line(self, line: str) -> Event | None:
        if not line:  # a blank line sends the event (once anything was set: an id counts)
            if not self._event and not self._data and not self._last_event_id and self._retry is None:
                return None
            event = Event(self._event, "\n".join(self._data), self._last_event_id, self._retry)
            self._event, self._data, self._retry = None, [], None  # the last id stays, as the spec says
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._last_event_id = value
        elif name == "retry":
            with contextlib.suppress(ValueError):  # not a number: ignored, as the SDK does
                self._retry = int(value)
        return None


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


def record_chunk(seen: Recording, data: Any, at: float) -> bool:
    """A chunk's JSON recorded on `seen` straight from the dict; False when it is not a plain chunk
    (then the answer is not a chat stream)."""
    plain = plain_chunk(data)
    if plain is None:
        return False
    choices, usage = plain
    if usage is not None:
        seen.add_usage(usage.get("completion_tokens"), usage.get("prompt_tokens"))
    for _, content, finish in choices:
        seen.add_choice(content, finish, at)
    return True
