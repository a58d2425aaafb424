"""A Chat Completions answer, read by us and not by the SDK's models.

The SDK hands back a `200 text/plain` body as a `str`, and builds its models from JSON of any
shape without checking it (`choices: "none"` gives a `str` where a list is expected), so each
of those ended a whole run with an AttributeError. Here an answer is a JSON object with
`choices[0].message`, or it is one unparseable answer (a judge error once asked again).

Usage is what the judge says it charged, so it is checked against what was asked: a count that
is not a non-negative integer is ignored, and one past the request's bounds is capped there,
with a note (`completion_tokens` at `max_tokens`; `prompt_tokens` at the prompt's size in bytes
plus a chat template's tokens: no tokenizer makes more tokens than bytes). A judge that reports
10^12 tokens is not charged for them.
"""

from __future__ import annotations

import json
from typing import Any

PROMPT_TEMPLATE_TOKENS = 1024  # a chat template's tokens around the prompt (roles, a default system prompt)


class UnparseableAnswer(ValueError):
    """A judge's answer that holds no verdict: one judge error for its sample, never a score."""


def completion_json(body: bytes, content_type: str) -> dict[str, Any]:
    """The answer's JSON object; a body that is not one is an UnparseableAnswer."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        excerpt = body[:120].decode("utf-8", "replace")
        raise UnparseableAnswer(f"not a chat completion ({_media(content_type)}): {excerpt!r}")
    return data


def answer_text(data: dict[str, Any], content_type: str) -> tuple[str, str | None]:
    """(content, finish_reason) of the first choice. Content given as parts (`[{"type": "text",
    "text": ...}]`, as some gateways do) is joined."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or not isinstance(message, dict):
        raise UnparseableAnswer(f"not a chat completion ({_media(content_type)}): no choices[0].message")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part["text"] for part in content
                          if isinstance(part, dict) and isinstance(part.get("text"), str))
    if content is not None and not isinstance(content, str):
        raise UnparseableAnswer(f"not a chat completion ({_media(content_type)}): its content is not text")
    finish = choice.get("finish_reason")
    return content or "", finish if isinstance(finish, str) else None


def usage_counts(usage: Any, prompt_bound: int, completion_bound: int) -> tuple[int, int, list[str]]:
    """(prompt tokens, completion tokens, notes on what was ignored or capped). No usage: (0, 0)."""
    if not isinstance(usage, dict):
        return 0, 0, []
    notes: list[str] = []
    prompt = _bounded("prompt_tokens", usage.get("prompt_tokens"), prompt_bound, notes)
    completion = _bounded("completion_tokens", usage.get("completion_tokens"), completion_bound, notes)
    return prompt, completion, notes


def _bounded(name: str, value: Any, bound: int, notes: list[str]) -> int:
    if value is None:
        return 0
    count = _count(value)
    if count is None:
        notes.append(f"{name} {repr(value)[:40]} ignored")
        return 0
    if count > bound:
        notes.append(f"{name} {count} capped at {bound}")
        return bound
    return count


def _count(value: Any) -> int | None:
    """A token count: a non-negative integer (an integral float too); bool, text, NaN are not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if value >= 0 else None


def _media(content_type: str) -> str:
    return content_type.split(";")[0].strip()[:60] or "no Content-Type"
