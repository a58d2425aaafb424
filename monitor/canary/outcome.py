"""What one probe saw -> its outcome and numbers (pure: plain values in, plain values out).

    TTFT  = first content token - request sent              (the client's clock, not the engine's)
    TPOT  = (last content token - first content token) / (output tokens - 1)      (vLLM's TPOT)
    e2e   = end of the stream - request sent                (only for a stream that completed)
    gap   = client TTFT - the engine's own P50 TTFT for the probe's target over the window

Output tokens come from the stream's `usage` when the server sends it (we always ask for it),
else from the number of content chunks (one token per chunk, as vLLM and OpenAI stream).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

Outcome = Literal[
    "ok",
    "refused",  # no connection (refused, unreachable, DNS)
    "timeout",  # no complete answer within the probe's timeout
    "rate_limited",  # HTTP 429
    "http_4xx",  # any other 4xx (bad key, unknown model, bad request)
    "http_5xx",
    "connection_error",  # the connection broke before an answer started
    "broken_stream",  # the answer started, then the stream broke or ended without finishing
    "bad_response",  # an answer that is not a chat-completion stream
    "empty_answer",  # the stream finished without a single content token
    "expect_mismatch",  # a complete answer that does not match the probe's `expect`
]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)

# What the I/O layer reports when the request did not run its course.
Failure = Literal["refused", "timeout", "status", "connection", "invalid"]

_DETAIL_CHARS = 160


@dataclass(frozen=True)
class Observed:
    """One probe as its I/O saw it; times are seconds since the request was sent."""

    status: int | None = None  # HTTP status, once an answer (or an error answer) came
    first_content_s: float | None = None
    last_content_s: float | None = None
    ended_s: float | None = None  # the stream ended in order ([DONE] or end of body)
    content_chunks: int = 0
    text: str = ""
    usage_tokens: int | None = None
    usage_prompt_tokens: int | None = None  # the stream's usage.prompt_tokens, when sent
    finish_reason: str | None = None
    failure: Failure | None = None
    detail: str = ""  # the failure's reason, already free of secrets


@dataclass(frozen=True)
class ProbeResult:
    outcome: Outcome
    detail: str
    status: int | None
    ttft_seconds: float | None
    tpot_seconds: float | None
    e2e_seconds: float | None
    output_tokens: int | None
    tokens_from: Literal["usage", "chunks"] | None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


def judge(seen: Observed, expect: re.Pattern[str] | None = None) -> ProbeResult:
    outcome, detail = _classify(seen, expect)
    tokens, tokens_from = _output_tokens(seen)
    return ProbeResult(
        outcome=outcome,
        detail=detail[:_DETAIL_CHARS],
        status=seen.status,
        ttft_seconds=seen.first_content_s,
        tpot_seconds=tpot(seen.first_content_s, seen.last_content_s, tokens),
        e2e_seconds=seen.ended_s if seen.failure is None else None,
        output_tokens=tokens,
        tokens_from=tokens_from,
    )


def _classify(seen: Observed, expect: re.Pattern[str] | None) -> tuple[Outcome, str]:
    if seen.failure == "status":
        return outcome_of_status(seen.status), seen.detail
    if seen.failure == "connection":
        # The same broken connection means another thing before and after the answer started.
        return ("broken_stream" if seen.status is not None else "connection_error"), seen.detail
    if seen.failure is not None:
        failures: dict[Failure, Outcome] = {"refused": "refused", "timeout": "timeout", "invalid": "bad_response"}
        return failures[seen.failure], seen.detail
    if seen.finish_reason is None:
        return "broken_stream", f"the stream ended before a finish_reason ({seen.content_chunks} content chunks)"
    if seen.content_chunks == 0:
        return "empty_answer", f"finish_reason {seen.finish_reason} without any content"
    if expect is not None and expect.search(seen.text) is None:
        return "expect_mismatch", f"answer does not match /{expect.pattern}/: {seen.text[:80]!r}"
    return "ok", ""


def outcome_of_status(status: int | None) -> Outcome:
    if status == 429:
        return "rate_limited"
    if status is not None and 400 <= status < 500:
        return "http_4xx"
    if status is not None and status >= 500:
        return "http_5xx"
    return "bad_response"  # an error without a 4xx/5xx status (a 3xx we do not follow, say)


def _output_tokens(seen: Observed) -> tuple[int | None, Literal["usage", "chunks"] | None]:
    if seen.usage_tokens is not None:
        return seen.usage_tokens, "usage"
    if seen.content_chunks:
        return seen.content_chunks, "chunks"
    return None, None


def tpot(first_s: float | None, last_s: float | None, tokens: int | None) -> float | None:
    """Mean time per output token after the first; None with fewer than two tokens."""
    if first_s is None or last_s is None or tokens is None or tokens < 2:
        return None
    return (last_s - first_s) / (tokens - 1)


def ttft_gap(client_ttft: float | None, engine_p50_ttft: float | None) -> float | None:
    """What the path in front of the engine adds to the first token (may be negative: noise)."""
    if client_ttft is None or engine_p50_ttft is None:
        return None
    return client_ttft - engine_p50_ttft


def describe_probe(result: ProbeResult | None) -> str:
    """One line for a person: `ok, TTFT 0.052 s, TPOT 0.015 s, 32 tokens` or `FAILED: timeout (...)`."""
    if result is None:
        return "FAILED: the prober itself failed (see the log)"
    if not result.ok:
        return f"FAILED: {result.outcome} ({result.detail})"
    numbers = [f"TTFT {result.ttft_seconds:.3f} s"] if result.ttft_seconds is not None else []
    if result.tpot_seconds is not None:
        numbers.append(f"TPOT {result.tpot_seconds:.3f} s")
    numbers.append(f"{result.output_tokens} tokens")
    return ", ".join(["ok", *numbers])
