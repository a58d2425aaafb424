"""One sampled response, and the request-log object it arrives as.

The wire shape (POST /api/v1/samples, JSONL files):
    {"model": "qwen3-8b", "prompt": "..." | [{"role": "user", "content": "..."}],
     "response": "...", "context"?: "..." | ["passage", ...], "reference"?: "...",
     "request_id"?: "...", "timestamp"?: "2026-11-30T08:00:00Z", "output_tokens"?: 123}
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_OUTPUT_TOKENS = 2**31 - 1  # a bigger count is no real response (and overflows the column)


@dataclass(frozen=True)
class Sample:
    model: str
    prompt: str
    response: str
    timestamp: float  # unix seconds
    context: str | None = None
    reference: str | None = None
    request_id: str | None = None
    output_tokens: int | None = None
    source: str = "requestlog"
    trace_id: str | None = None  # Langfuse: where the score goes back to
    observation_id: str | None = None

    @property
    def key(self) -> str:
        """Stable identity: the request id when there is one, else a digest of the content."""
        if self.request_id:
            return f"{self.source}:{self.request_id}"[:200]
        digest = hashlib.sha256(
            "\x00".join([self.model, repr(self.timestamp), self.prompt, self.response]).encode()
        ).hexdigest()[:32]
        return f"{self.source}:sha256:{digest}"

    def redacted(self, redact: Callable[[str | None], str | None]) -> Sample:
        return replace(
            self,
            prompt=redact(self.prompt) or "",
            response=redact(self.response) or "",
            context=redact(self.context),
            reference=redact(self.reference),
        )


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class SampleIn(BaseModel):
    """The request-log object, validated; `to_sample()` flattens messages into text."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=256)
    prompt: str | list[Message]
    response: str
    context: str | list[str] | None = None
    reference: str | None = None
    request_id: str | None = Field(None, max_length=190)
    timestamp: datetime | None = None
    output_tokens: int | None = Field(None, ge=0, le=MAX_OUTPUT_TOKENS)

    @field_validator("timestamp")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("timestamp needs a time zone (RFC 3339, e.g. 2026-11-30T08:00:00Z)")
        return value

    def to_sample(self, now: float, source: str = "requestlog", max_chars: int | None = None) -> Sample:
        prompt = self.prompt if isinstance(self.prompt, str) else _flatten(self.prompt)
        context = "\n\n".join(self.context) if isinstance(self.context, list) else self.context
        fields = {"prompt": prompt, "response": self.response, "context": context, "reference": self.reference}
        if max_chars is not None:
            too_long = [name for name, text in fields.items() if text is not None and len(text) > max_chars]
            if too_long:
                raise ValueError(f"{', '.join(too_long)} longer than {max_chars} characters")
        ts = self.timestamp.astimezone(UTC).timestamp() if self.timestamp else now
        return Sample(self.model, prompt, self.response, ts, context, self.reference, self.request_id,
                      self.output_tokens, source)


def _flatten(messages: list[Message]) -> str:
    """OpenAI-style messages as `role: text` lines (multi-part content keeps its text parts)."""
    lines = []
    for message in messages:
        content = message.content
        if isinstance(content, list):
            content = " ".join(str(part.get("text", "")) for part in content if part.get("type", "text") == "text")
        lines.append(f"{message.role}: {content or ''}")
    return "\n".join(lines)
