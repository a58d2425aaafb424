"""The LLM judge: one Chat Completions call per sample through the `openai` SDK.

Any OpenAI-compatible server works (OpenAI, vLLM, SGLang, Ollama, gateways). The rubric is a
template file (`monitor/data/judge_rubric.md`, Prometheus-eval style). Structured output is
asked for with a JSON schema; a server that answers a structured request with any 4xx (whatever
its words: llama-server speaks of samplers) is asked again without it (and not asked with it
again), and answers are read by a tolerant parser either way. Every call is bounded by
`max_tokens`, so a judge that never closes its JSON stops there instead of at the timeout.
Retries with exponential backoff on 429 (honouring Retry-After), 5xx, timeouts and broken
connections; a sample whose judgement still fails is a judge error with its cause, never a score.

Bounded in time and bytes: `timeout` is the deadline of each attempt as a whole
(connect, send, every byte of the answer), not of each read, so a sample takes at most
`max_retries + 1` timeouts plus the backoffs between them; an answer past `answer_cap(max_tokens)`
is refused unread (`judge_http`); the answer and its usage are read by `completion`, so an
answer that is no chat completion is one judge error and absurd usage is capped in the cost. The
API key is replaced by `<secret>` in anything a judge's answer puts in an error or a reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Any, cast

import openai
from openai import AsyncOpenAI

from monitor.aio import finish
from monitor.config import JudgeSettings
from monitor.quality.completion import (
    PROMPT_TEMPLATE_TOKENS,
    UnparseableAnswer,
    answer_text,
    completion_json,
    usage_counts,
)
from monitor.quality.judge_http import AnswerRejected, ApiKey, answer_cap, capped_client
from monitor.quality.store import Verdict

__all__ = ["Judge", "JudgeInput", "UnparseableAnswer", "build_prompt", "parse_answer"]

log = logging.getLogger("monitor.quality.judge")

RUBRIC_TEXT = (Path(__file__).parent.parent / "data" / "judge_rubric.md").read_text()
RUBRIC = Template(RUBRIC_TEXT)
# Bumped by hand when the rubric's meaning changes (the template hash changes with any edit).
RUBRIC_VERSION = "1"
TEMPLATE_SHA256 = hashlib.sha256(RUBRIC_TEXT.encode()).hexdigest()[:16]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "refusal": {"type": "boolean"},
        "hallucination": {"type": "boolean"},
        "reason": {"type": "string"},
    },
    "required": ["score", "refusal", "hallucination", "reason"],
    "additionalProperties": False,
}
RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": "judgement", "strict": True, "schema": SCHEMA},
}
MAX_RETRY_AFTER_S = 120.0
# 4xx that say who or when, not what was asked: asking without response_format would not help.
_NOT_ABOUT_THE_REQUEST = frozenset({401, 403, 408, 409, 429})


@dataclass(frozen=True)
class JudgeInput:
    prompt: str
    response: str
    context: str | None = None
    reference: str | None = None


def build_prompt(item: JudgeInput) -> str:
    grounded = item.context or item.reference
    rule = (
        "the response states something that the retrieved context or the reference answer contradicts or does not "
        "support." if grounded else "the response makes factual claims that are false or unsupported (invented "
        "facts, citations, numbers or names)."
    )
    return RUBRIC.substitute(
        prompt=item.prompt, response=item.response, context=item.context or "(none)",
        reference=item.reference or "(none)", hallucination_rule=rule,
    )


class Judge:
    def __init__(
        self,
        settings: JudgeSettings,
        api_key: str,
        *,
        backoff_s: float = 0.5,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.answer_cap = answer_cap(settings.max_tokens)
        # httpx's client, where SDK 3.x annotates httpx2's: it takes either (judge_http says why).
        http_client = cast(Any, capped_client(self.answer_cap, settings.timeout.seconds, settings.concurrency))
        self.key = ApiKey(api_key)
        self.client = AsyncOpenAI(api_key=self.key.value, base_url=settings.base_url,
                                  timeout=settings.timeout.seconds, max_retries=0, http_client=http_client)
        self.scrub = self.key.scrub  # what a judge's answer puts in an error, a reason or a log line
        self.structured = settings.structured_output
        # Reasoning models (gpt-5, o-series) accept only their default temperature: asked once, then left out.
        self.temperature: float | None = 0.0
        # OpenAI's reasoning models refuse `max_tokens` and want `max_completion_tokens` (same bound).
        self.token_limit = "max_tokens"
        self.backoff_s = backoff_s
        self.sleep = sleep
        self.calls = 0  # HTTP calls made (a benchmark and the tests read it)
        self.usage_capped = 0  # answers whose usage was capped or ignored in the cost
        # What the answers say judged them: (`model`, `system_fingerprint`) -> answers (JudgeIdentity)
        self.answered_by: Counter[tuple[str | None, str | None]] = Counter()

    async def judge(self, item: JudgeInput) -> Verdict:
        usage = [0, 0]
        attempts = 0
        parse_failures = 0
        last_error = "no attempt"
        while attempts <= self.settings.max_retries:
            attempts += 1
            finish: str | None = None
            asked = (self.structured, self.temperature, self.token_limit)  # calls in flight share the judge
            try:
                async with asyncio.timeout(self.settings.timeout.seconds):  # the whole attempt, not each read
                    content, finish = await self._call(build_prompt(item), usage)
                score, refusal, hallucination, reason = parse_answer(content)
                return self._verdict(score, refusal, hallucination, reason, None, attempts, usage)
            except UnparseableAnswer as exc:
                cut = f" (cut at max_tokens {self.settings.max_tokens})" if finish == "length" else ""
                last_error = f"unparseable judge answer{cut}: {exc}"
                parse_failures += 1
                if parse_failures > 1:  # temperature 0: a third try would say the same
                    break
                continue
            except openai.APIStatusError as exc:
                if self._degrade(exc, *asked):
                    attempts -= 1
                    continue
                last_error = f"HTTP {exc.status_code}: {self._message(exc)}"
                if exc.status_code != 429 and exc.status_code < 500:
                    break  # 401, 403, 404: retrying will not help
                wait = _retry_after(exc) if exc.status_code == 429 else None
            except AnswerRejected as exc:  # the SDK 3.x lets it through; 1.x wraps it (below)
                last_error = str(exc)
                break
            except (TimeoutError, openai.APITimeoutError):
                last_error = f"timed out after {self.settings.timeout.seconds:g}s"
                wait = None
            except openai.APIConnectionError as exc:
                if isinstance(exc.__cause__, AnswerRejected):
                    last_error = str(exc.__cause__)
                    break
                last_error = f"connection failed: {exc.__cause__ or exc}"
                wait = None
            except openai.OpenAIError as exc:  # any other: this sample's error, not the run's end
                last_error = f"judge call failed: {type(exc).__name__}: {self.scrub(str(exc))[:200]}"
                break
            if attempts <= self.settings.max_retries:
                await self.sleep(wait if wait is not None else self._backoff(attempts))
        return self._verdict(None, None, None, None, last_error, attempts, usage)

    def _degrade(self, exc: openai.APIStatusError, structured: bool, temperature: float | None,
                 token_limit: str) -> bool:
        """Leave out what a 4xx rejected (True: ask again, not counted as an attempt).

        A parameter the error names goes first (temperature, max_tokens); any other 4xx to a
        structured request drops response_format: servers word that rejection every way. The
        arguments are what this request was sent with: a concurrent call may have degraded already.
        """
        status, text = exc.status_code, self._message(exc).lower()
        if not 400 <= status < 500 or status in _NOT_ABOUT_THE_REQUEST:
            return False
        if temperature is not None and "temperature" in text:
            if self.temperature is not None:
                log.warning("judge %s rejects temperature 0; using its default", self.settings.model)
            self.temperature = None
        elif token_limit == "max_tokens" and "max_tokens" in text:
            if self.token_limit == "max_tokens":
                log.warning("judge %s rejects max_tokens; sending max_completion_tokens", self.settings.model)
            self.token_limit = "max_completion_tokens"
        elif structured:
            if self.structured:
                log.warning("judge %s answered a structured request with HTTP %d (%s); using the fallback parser",
                            self.settings.model, status, self._message(exc)[:120])
            self.structured = False
        else:
            return False
        return True

    async def _call(self, prompt: str, usage: list[int]) -> tuple[str, str | None]:
        """The answer's text and finish reason (`length`: cut at max_tokens)."""
        extra: dict[str, Any] = {"response_format": RESPONSE_FORMAT} if self.structured else {}
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        extra[self.token_limit] = self.settings.max_tokens
        self.calls += 1
        raw = await self.client.chat.completions.with_raw_response.create(
            model=self.settings.model, messages=[{"role": "user", "content": prompt}], **extra
        )
        content_type = raw.http_response.headers.get("content-type", "")
        data = completion_json(self.key.scrub_bytes(raw.http_response.content), content_type)
        prompt_bound = len(prompt.encode()) + PROMPT_TEMPLATE_TOKENS
        prompt_tokens, completion_tokens, notes = usage_counts(data.get("usage"), prompt_bound,
                                                               self.settings.max_tokens)
        usage[0] += prompt_tokens
        usage[1] += completion_tokens
        self.answered_by[(_short(data.get("model")), _short(data.get("system_fingerprint")))] += 1
        if notes:
            self._note_usage(notes)
        return answer_text(data, content_type)

    def _note_usage(self, notes: list[str]) -> None:
        self.usage_capped += 1
        if self.usage_capped == 1:  # once per run: a judge that miscounts does it on every answer
            log.warning("judge %s reported usage beyond what was asked (%s): the cost counts the bounds",
                        self.settings.model, self.scrub("; ".join(notes)))

    def _backoff(self, attempt: int) -> float:
        return float(min(30.0, self.backoff_s * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))

    def _verdict(self, score: int | None, refusal: bool | None, hallucination: bool | None, reason: str | None,
                 error: str | None, attempts: int, usage: list[int]) -> Verdict:
        cost = (usage[0] * self.settings.usd_per_million_input_tokens
                + usage[1] * self.settings.usd_per_million_output_tokens) / 1e6
        reason = self.scrub(reason) if reason is not None else None
        error = self.scrub(error) if error is not None else None
        return Verdict(score, refusal, hallucination, reason, error, attempts, usage[0], usage[1], cost)

    def failed(self, error: str) -> Verdict:
        """A sample's verdict when judging it failed in a way the judge did not foresee."""
        return self._verdict(None, None, None, None, error, 0, [0, 0])

    def _message(self, exc: openai.APIStatusError) -> str:
        """The error's message, scrubbed before it is cut short (a cut could keep a part of the key)."""
        body = exc.body
        inner = body.get("error", body) if isinstance(body, dict) else None
        if isinstance(inner, dict) and inner.get("message"):
            return self.scrub(str(inner["message"]))[:300]
        return self.scrub(str(exc.message))[:300]

    async def endpoint_models(self) -> list[str] | None:
        """The model ids the endpoint lists (GET /v1/models); None where it does not say (bounded, never fatal)."""
        try:
            async with asyncio.timeout(self.settings.timeout.seconds):
                page = await self.client.models.list()
            return [_short(m.id) or "" for m in page.data][:20]
        except Exception as exc:  # an endpoint without the route, or one that answers junk: unknown, not an error
            log.info("judge %s: GET /models said nothing usable: %s", self.settings.model,
                     self.scrub(str(exc))[:200])
            return None

    async def aclose(self) -> None:
        await finish(self.client.close())  # a run cancelled as it ends must still close every connection


def _short(value: Any) -> str | None:
    return str(value)[:200] if isinstance(value, str) and value else None


def parse_answer(content: str) -> tuple[int, bool, bool, str]:
    """(score, refusal, hallucination, reason) from JSON, fenced JSON, or `Score: 4`-style text."""
    data = _json_object(content)
    if data is None:
        if "{" in content:  # broken JSON (truncated, unbalanced): half an answer is not an answer
            raise UnparseableAnswer(f"malformed JSON: {content[:120]!r}")
        data = _key_values(content)
    score = _score(data.get("score"))
    if score is None:
        raise UnparseableAnswer(repr(content[:120]))
    return (score, _flag(data.get("refusal")), _flag(data.get("hallucination")),
            str(data.get("reason") or "").strip()[:2000])


def _json_object(content: str) -> dict[str, Any] | None:
    text = content.strip()
    candidates = [text]
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if match:
        candidates.append(match.group(0))
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict):
            return {str(k).lower(): v for k, v in data.items()}
    return None


# A verdict in text: `Score: 4` (评分/分数/得分：4 in Chinese) or Prometheus-eval's `[RESULT] 4`.
_SCORE = re.compile(r"(?:score|评分|分数|得分)\W{0,5}([1-5])(?![\d.])|\[RESULT\]\s*([1-5])(?![\d.])",
                    re.IGNORECASE)
_FLAGS = {flag: re.compile(rf"{flag}\W{{0,5}}(true|false|yes|no)", re.IGNORECASE)
          for flag in ("refusal", "hallucination")}
_REASON = re.compile(r"reason\W{0,5}(.+)", re.IGNORECASE)


def _last(pattern: re.Pattern[str], content: str) -> re.Match[str] | None:
    """The last match: a judge gives its verdict last, and may quote a score before it in its
    feedback (the answer's own "Score: 5", a rubric's example): the first would be steered."""
    matches = list(pattern.finditer(content))
    return matches[-1] if matches else None


def _key_values(content: str) -> dict[str, Any]:
    data: dict[str, Any] = {}
    score = _last(_SCORE, content)
    if score:
        data["score"] = score.group(1) or score.group(2)
    for flag, pattern in _FLAGS.items():
        match = _last(pattern, content)
        if match:
            data[flag] = match.group(1)
    reason = _last(_REASON, content)
    data["reason"] = reason.group(1).strip().strip('"') if reason else content.strip()[:500]
    return data


def _score(value: Any) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() and 1 <= number <= 5 else None


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return bool(value)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    header = exc.response.headers.get("retry-after")
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(header))) if header is not None else None
    except ValueError:
        return None  # an HTTP date: use our own backoff
