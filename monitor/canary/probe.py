"""One probe's I/O: a small streaming chat completion through the openai SDK, timed by the client.

The SDK is the one users call the engines with, so what it sees is what they see: the gateway,
the load balancer, TLS, the network path. The SDK never retries (a retry would hide the failure
we are here to see). One case is sent again, once: a connection that broke before any answer,
which is a kept connection the server was closing as we sent (llama.cpp's llama-server closes
each one after its stream without `Connection: close`). A server that breaks every connection
still fails. It asks for the stream's `usage`, and marks its requests twice so operators can
leave them out of usage reports: the OpenAI `user` field and an `X-Infermon-Canary: <probe>`
header. The API key lives only inside the SDK client; every error text is scrubbed of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from typing import Any

import openai

from monitor.aio import finish
from monitor.canary import CANARY_HEADER
from monitor.canary.outcome import Failure, Observed
from monitor.config import CanaryProbe

log = logging.getLogger("monitor.canary.probe")

NO_KEY = "EMPTY"  # what vLLM's docs pass when the server wants none; never OPENAI_API_KEY from our environment


class Prober:
    """Runs the probes of one `CanaryProbe`, one at a time, on one SDK client (kept alive)."""

    def __init__(self, probe: CanaryProbe, user: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self.probe = probe
        self.user = user
        self.clock = clock
        self._key = os.environ.get(probe.api_key_env, "") if probe.api_key_env else ""
        self._client = openai.AsyncOpenAI(
            api_key=self._key or NO_KEY,
            base_url=probe.base_url,
            max_retries=0,
            timeout=probe.timeout.seconds,
            default_headers={CANARY_HEADER: probe.name},
        )

    async def run(self) -> Observed:
        request = {"model": self.probe.model, "messages": [{"role": "user", "content": probe_prompt(self.probe)}],
                   "max_tokens": self.probe.max_tokens, "user": self.user}
        return await observe_stream(self._client, request, self.probe.timeout.seconds, self.clock, self._scrub,
                                    timeout_text=str(self.probe.timeout))

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "<secret>") if self._key else text

    async def aclose(self) -> None:
        await finish(self._client.close())


def probe_prompt(probe: CanaryProbe) -> str:
    """The prompt of one probe: with a fresh nonce in front unless `nonce: false`.

    The nonce comes first because a prefix cache matches from the start: a prompt that differs in
    its first tokens is prefilled in full, so the TTFT is what a new user's request costs
    (with the same prompt every time, llama.cpp served 38 of 39 prompt tokens from its cache).
    """
    return f"[{secrets.token_hex(4)}] {probe.prompt}" if probe.nonce else probe.prompt


async def observe_stream(
    client: openai.AsyncOpenAI, request: dict[str, Any], timeout_s: float, clock: Callable[[], float],
    scrub: Callable[[str], str] = lambda text: text, timeout_text: str | None = None,
) -> Observed:
    """One streamed chat completion (`request`: the SDK's create() arguments), timed on `clock`
    from just before the request is sent; every way it can fail becomes a `Failure`. The canary
    and `infermon bench` both measure through this."""
    seen = Recording()
    started = clock()
    limit = timeout_text or f"{timeout_s:g}s"
    try:
        async with asyncio.timeout(timeout_s):
            try:
                await _stream(client, request, seen, started, clock)
            except Exception as exc:
                if not _gone_before_answer(seen, exc):
                    raise
                # Sent on a kept connection the server was closing: once more, on a new one (the
                # pool drops the broken one), timed from the first send. A server that breaks every
                # connection fails this one too.
                log.debug("the connection closed before an answer (%s): sending once more", type(exc).__name__)
                seen = Recording()
                await _stream(client, request, seen, started, clock)
    except TimeoutError:
        seen.fail("timeout", f"no complete answer within {limit}")
    except openai.APIStatusError as exc:
        seen.status = exc.status_code
        seen.fail("status", f"HTTP {exc.status_code}: {_message(exc)}")
    except openai.APITimeoutError:
        seen.fail("timeout", f"the SDK timed out ({limit})")
    except openai.APIConnectionError as exc:
        seen.fail(*transport_failure(exc))
    except Exception as exc:
        # SDKs before 2.x let a transport error in the middle of a stream through unwrapped.
        if _is_transport(exc):
            seen.fail(*transport_failure(exc))
        elif isinstance(exc, openai.OpenAIError | json.JSONDecodeError | ValueError):
            seen.fail("invalid", f"{type(exc).__name__}: {exc}")
        else:
            raise  # a bug of ours: the caller's own health shows it
    # An answer is shown (expect_mismatch) as well as a failure's reason: neither may carry the key.
    seen.detail, seen.parts = scrub(seen.detail), [scrub("".join(seen.parts))]
    return seen.observed()


async def _stream(client: openai.AsyncOpenAI, request: dict[str, Any], seen: Recording, started: float,
                  clock: Callable[[], float]) -> None:
    stream = await client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True})
    seen.status = stream.response.status_code
    async with stream:
        async for chunk in stream:
            seen.chunk(chunk, clock() - started)
    seen.ended_s = clock() - started


class Recording:
    """The mutable side of `Observed`, filled while the stream runs."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.first_content_s: float | None = None
        self.last_content_s: float | None = None
        self.ended_s: float | None = None
        self.content_chunks = 0
        self.parts: list[str] = []
        self.usage_tokens: int | None = None
        self.usage_prompt_tokens: int | None = None
        self.finish_reason: str | None = None
        self.failure: Failure | None = None
        self.detail = ""

    def chunk(self, chunk: Any, at: float) -> None:
        """One chunk as the SDK makes it (attributes), arrived `at` seconds after the send."""
        if chunk.usage is not None:
            self.add_usage(chunk.usage.completion_tokens, chunk.usage.prompt_tokens)
        for choice in chunk.choices:
            self.add_choice(choice.delta.content if choice.delta is not None else None, choice.finish_reason, at)

    def add_usage(self, completion_tokens: int | None, prompt_tokens: int | None) -> None:
        if completion_tokens is not None:
            self.usage_tokens, self.usage_prompt_tokens = completion_tokens, prompt_tokens

    def add_choice(self, content: str | None, finish_reason: str | None, at: float) -> None:
        if content:
            if self.first_content_s is None:
                self.first_content_s = at
            self.last_content_s = at
            self.content_chunks += 1
            self.parts.append(content)
        if finish_reason is not None:
            self.finish_reason = finish_reason

    def fail(self, failure: Failure, detail: str) -> None:
        self.failure, self.detail = failure, detail

    def observed(self) -> Observed:
        return Observed(
            status=self.status,
            first_content_s=self.first_content_s,
            last_content_s=self.last_content_s,
            ended_s=self.ended_s if self.failure is None else None,
            content_chunks=self.content_chunks,
            text="".join(self.parts),
            usage_tokens=self.usage_tokens,
            usage_prompt_tokens=self.usage_prompt_tokens,
            finish_reason=self.finish_reason,
            failure=self.failure,
            detail=self.detail,
        )


def _message(exc: openai.APIStatusError) -> str:
    return error_message(exc.body) or type(exc).__name__


def error_message(body: Any) -> str | None:
    """An error answer's message: `{"error": {"message": ...}}` (OpenAI's shape) or `{"message": ...}`."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
    return None


_TRANSPORTS = frozenset({"httpx", "httpx2", "httpcore", "httpcore2", "h11", "anyio"})


def _is_transport(exc: BaseException) -> bool:
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in _TRANSPORTS


def _gone_before_answer(seen: Recording, exc: Exception) -> bool:
    """The connection broke before any answer came: what a request meets on a kept connection
    that the server closes after each answer without saying so (llama.cpp's llama-server does)."""
    if seen.status is not None or isinstance(exc, openai.APITimeoutError):
        return False
    if not isinstance(exc, openai.APIConnectionError) and not _is_transport(exc):
        return False
    return transport_failure(exc)[0] == "connection"


def transport_failure(exc: BaseException) -> tuple[Failure, str]:
    """Refused (nobody listening, unreachable, no such host), timed out or broken, from the cause chain."""
    causes: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and len(causes) < 8:
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    reason = next((f"{type(c).__name__}: {c}" for c in reversed(causes) if str(c)), type(exc).__name__)
    connect_failed = any(isinstance(c, ConnectionRefusedError) or type(c).__name__ == "ConnectError" for c in causes)
    if connect_failed:
        return "refused", reason
    return ("timeout" if any("Timeout" in type(c).__name__ for c in causes) else "connection"), reason
