"""OpenAI-compatible request and response shapes served by the vLLM V1 simulator.

Only the fields the simulator acts on are typed; anything else a client sends (temperature,
top_p, tools, ...) is accepted and ignored, as a sampling-agnostic simulator should.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Filler output: token k of every answer is _TOKENS[k % len(_TOKENS)] (BPE-like, leading space).
_WORDS = ("the", "simulated", "model", "answers", "with", "filler", "words", "so", "the",
          "monitor", "sees", "real", "tokens", "flow", "through", "a", "vLLM", "shaped",
          "server", "while", "nothing", "runs", "on", "a", "GPU")  # fmt: skip
_TOKENS = tuple(f" {word}" for word in _WORDS)


def filler_text(start: int, count: int) -> str:
    return "".join(_TOKENS[k % len(_TOKENS)] for k in range(start, start + count))


def count_words(text: str) -> int:
    return len(text.split())


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None

    def words(self) -> int:
        if isinstance(self.content, str):
            return count_words(self.content)
        parts = self.content or []
        return sum(count_words(str(p.get("text", ""))) for p in parts if p.get("type") == "text")

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return " ".join(str(p.get("text", "")) for p in self.content or [] if p.get("type") == "text")


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None

    def prompt_tokens(self) -> int:
        return sum(message.words() for message in self.messages)

    def prompt_text(self) -> str:
        return " ".join(message.text() for message in self.messages)

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens else self.max_tokens


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int]
    max_tokens: int | None = 16  # the legacy completions API defaults to 16, vLLM too

    def prompt_tokens(self) -> int:
        if isinstance(self.prompt, str):
            return count_words(self.prompt)
        if all(isinstance(p, int) for p in self.prompt):
            return len(self.prompt)  # already token ids
        return sum(count_words(str(p)) for p in self.prompt)

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else " ".join(str(p) for p in self.prompt)

    def token_limit(self) -> int | None:
        return self.max_tokens


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


class Reply:
    """Builds the bodies of one answer; `chat` picks chat.completion vs text_completion."""

    def __init__(self, chat: bool, model: str, include_usage: bool) -> None:
        self.chat = chat
        self.model = model
        self.include_usage = include_usage
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": choices}  # fmt: skip

    def full(self, text: str, finish_reason: str, prompt: int, completion: int) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason,
                                  "stop_reason": None}  # fmt: skip
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
            body = self._envelope("chat.completion", [choice])
        else:
            choice["text"] = text
            body = self._envelope("text_completion", [choice])
        body["usage"] = usage(prompt, completion)
        return body

    def chunk(self, text: str, finish_reason: str | None, first: bool = False) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish_reason}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": text} if first else {"content": text}
            body = self._envelope("chat.completion.chunk", [choice])
        else:
            choice["text"] = text
            choice["stop_reason"] = None
            body = self._envelope("text_completion", [choice])
        if self.include_usage:
            body["usage"] = None  # OpenAI: every chunk carries usage, null until the last one
        return body

    def usage_chunk(self, prompt: int, completion: int) -> dict[str, Any]:
        body = self._envelope("chat.completion.chunk" if self.chat else "text_completion", [])
        body["usage"] = usage(prompt, completion)
        return body
