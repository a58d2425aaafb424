"""What every receiver shares (Alertmanager's `notify/` in small): the message, the outcome,
the one retry policy, secrets that print as `<secret>`, and rate limits that queue.

A receiver is one class with `async send(notification) -> Outcome`; it never raises for a
failed send, and its errors never carry its URL, token or signing secret.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

import httpx

from monitor.alerting.model import Alert
from monitor.config import ReceiverSettings

REDACTED = "<secret>"


class Secret:
    """A value that prints as `<secret>` (repr, str, f-strings, tracebacks); `reveal()` to use it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__


@dataclass(frozen=True)
class DigestMessage:
    """A message that is no alert: the weekly digest. `document` is what a generic webhook gets
    (`infermon digest --json`), `text` what an IM bot shows under `title`; `key` is its
    idempotency key (one message per receiver and key, whatever happens)."""

    key: str
    title: str
    text: str
    document: Mapping[str, Any]


@dataclass(frozen=True)
class Notification:
    """One message for one receiver: the alerts of one group at one flush."""

    receiver: str
    group_key: str
    group_labels: Mapping[str, str]
    alerts: Sequence[Alert]
    external_url: str = ""
    truncated_alerts: int = 0
    digest: DigestMessage | None = None  # a digest instead of alerts (`alerts` is empty)

    @property
    def status(self) -> str:
        return "firing" if self.firing else "resolved"

    @property
    def firing(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "firing"]

    @property
    def resolved(self) -> list[Alert]:
        return [a for a in self.alerts if a.status == "resolved"]

    def common(self, attribute: str) -> dict[str, str]:
        """Labels (or annotations) every alert shares, as Alertmanager's commonLabels."""
        maps = [getattr(a, attribute) for a in self.alerts]
        if not maps:
            return {}
        return {k: v for k, v in maps[0].items() if all(m.get(k) == v for m in maps[1:])}


@dataclass(frozen=True)
class Outcome:
    sent: bool
    retry: bool = False
    error: str = ""


SENT = Outcome(True)


def from_status(status: int, detail: str = "") -> Outcome:
    """The retry policy, in one place: 2xx sent; 429 and 5xx retried; any other status is final."""
    if 200 <= status < 300:
        return SENT
    retry = status == 429 or status >= 500
    return Outcome(False, retry, f"HTTP {status}" + (f": {detail[:200]}" if detail else ""))


def from_error_code(code: Any, message: Any, retryable: frozenset[int]) -> Outcome:
    """IM platforms answer HTTP 200 with an error code in the body; rate-limit codes are retried."""
    if code in (0, None):
        return SENT
    return Outcome(False, code in retryable, f"error code {code}: {str(message)[:200]}")


class RateLimit:
    """At most `count` messages in any `per` seconds. Senders ask before sending and leave the
    message queued when the answer is "not yet": a limit never drops a notification."""

    def __init__(self, count: int, per: float) -> None:
        self.count, self.per = count, per
        self._sent: deque[float] = deque()

    def wait(self, now: float) -> float:
        while self._sent and self._sent[0] <= now - self.per:
            self._sent.popleft()
        return 0.0 if len(self._sent) < self.count else self._sent[0] + self.per - now

    def record(self, now: float) -> None:
        self._sent.append(now)


class Receiver(Protocol):
    name: str
    rate_limit: RateLimit | None

    async def send(self, notification: Notification) -> Outcome: ...


class HttpReceiver(ABC):
    """Posts JSON to the configured URL; subclasses build the body and read the answer."""

    rate_limit: RateLimit | None = None

    def __init__(self, settings: ReceiverSettings, client: httpx.AsyncClient) -> None:
        self.name = settings.name
        self.client = client
        self.url = Secret(settings.url.get_secret_value())
        self.secret = Secret(settings.secret.get_secret_value()) if settings.secret else None
        self.token = Secret(settings.token.get_secret_value()) if settings.token else None
        self.timeout = settings.timeout.seconds
        self.max_alerts = settings.max_alerts
        self._secrets = secret_parts(self.url.reveal(), self.secret, self.token)
        hide_in_logs(self._secrets)

    @abstractmethod
    def body(self, notification: Notification) -> dict[str, Any]:
        """The platform's JSON message for one notification."""

    @abstractmethod
    def digest_body(self, digest: DigestMessage) -> dict[str, Any]:
        """The platform's JSON message for the weekly digest (a free-text one for an IM bot)."""

    def _encoded(self, notification: Notification) -> bytes:
        if notification.digest is not None:
            return encode_json(self.digest_body(notification.digest)).encode()
        return encode_json(self.body(notification)).encode()

    def target(self) -> str:
        """The URL to post to (DingTalk adds its signature here)."""
        return self.url.reveal()

    def headers(self) -> dict[str, str]:
        return {}

    def outcome(self, response: httpx.Response) -> Outcome:
        return from_status(response.status_code, response.text)

    async def send(self, notification: Notification) -> Outcome:
        try:
            # A notification of thousands of alerts takes a while to build: not on the event loop.
            content = await asyncio.to_thread(self._encoded, notification)
            headers = {"Content-Type": "application/json", **self.headers()}
            if notification.digest is not None:  # a receiver that dedups on it never shows it twice
                headers["Idempotency-Key"] = notification.digest.key
            response = await self.client.post(self.target(), content=content, headers=headers, timeout=self.timeout)
            outcome = self.outcome(response)
        except httpx.HTTPError as exc:  # refused, reset, timed out: the receiver may come back
            outcome = Outcome(False, True, f"{type(exc).__name__}: {exc}")
        except ValueError as exc:  # an answer that is not the JSON the platform documents
            outcome = Outcome(False, True, f"unreadable answer: {exc}")
        return Outcome(outcome.sent, outcome.retry, redact(outcome.error, self._secrets))


def encode_json(value: Any, depth: int = 2) -> str:
    """JSON as httpx writes it, the top levels piece by piece: one C call encoding 5,000 alerts
    holds the GIL (and so the event loop) for its whole run; one per alert lets the loop in."""
    if depth and isinstance(value, dict):
        return "{" + ",".join(f"{_dump(str(k))}:{encode_json(v, depth - 1)}" for k, v in value.items()) + "}"
    if depth and isinstance(value, list):
        return "[" + ",".join(encode_json(item, depth - 1) for item in value) + "]"
    return _dump(value)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def secret_parts(url: str, *secrets: Secret | None) -> list[str]:
    """Everything that must never be printed: the URL, its path tail and query values, the secrets."""
    parts = [url, url.split("?", 1)[0]]
    split = urlsplit(url)
    tail = split.path.rstrip("/").rsplit("/", 1)[-1]
    parts += [tail] if len(tail) >= 8 else []
    parts += [value for _, value in parse_qsl(split.query) if len(value) >= 4]
    parts += [s.reveal() for s in secrets if s is not None]
    return sorted({p for p in parts if p}, key=len, reverse=True)


def redact(text: str, secrets: Sequence[str]) -> str:
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text


class _RedactingFilter(logging.Filter):
    """httpx logs every request's URL at INFO; an IM webhook URL carries its token."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: list[str] = []
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = redact(message, self.secrets)
        if hidden != message:
            record.msg, record.args = hidden, ()
        return True


_FILTER = _RedactingFilter()


def hide_in_logs(secrets: Sequence[str]) -> None:
    with _FILTER.lock:
        _FILTER.secrets = sorted(set(_FILTER.secrets) | set(secrets), key=len, reverse=True)
    for name in ("httpx", "httpcore"):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
