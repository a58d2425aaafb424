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

from types import SimpleNamespace
from typing import Any

import openai
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


class LeanAsyncOpenAI(openai.AsyncOpenAI):
    def _process_response_data(self, *, data: Any, cast_to: Any, response: Any) -> Any:
        if cast_to is ChatCompletionChunk:
            chunk = lean_chunk(data)
            if chunk is not None:
                return chunk
        return super()._process_response_data(data=data, cast_to=cast_to, response=response)
