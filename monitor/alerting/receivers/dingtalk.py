"""DingTalk custom robot: a markdown message.

    POST https://oapi.dingtalk.com/robot/send?access_token=…&timestamp=…&sign=…
    {"msgtype": "markdown", "markdown": {"title": "[FIRING:1] GPUHot", "text": "**…**"}, "at": {"isAtAll": false}}

Signing (optional): timestamp in milliseconds; HMAC-SHA256 keyed with the secret over
`timestamp + "\\n" + secret`, base64, URL-encoded, as query parameters. DingTalk answers HTTP
200 with `{"errcode": 0, "errmsg": "ok"}` or a non-zero errcode (310000 bad signature or
keyword, 130101 "send too fast": more than 20 messages a minute).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote_plus

import httpx

from monitor.alerting.receivers.base import (
    DigestMessage,
    HttpReceiver,
    Notification,
    Outcome,
    RateLimit,
    from_error_code,
    from_status,
)
from monitor.alerting.receivers.text import digest_markdown, escape_im, markdown, title

TEXT_BYTES = 9_000  # DingTalk takes up to 20,000 bytes; line breaks double before sending
RATE_LIMITED = frozenset({130101, 410100, -1})  # too fast (per minute, per second); -1 system busy


def sign(timestamp_ms: int, secret: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest).decode())


class DingTalkReceiver(HttpReceiver):
    clock: Callable[[], float] = time.time

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rate_limit = RateLimit(20, 60.0)

    def target(self) -> str:
        url = self.url.reveal()
        if self.secret is None:
            return url
        stamp = int(self.clock() * 1000)
        joiner = "&" if "?" in url else "?"
        return f"{url}{joiner}timestamp={stamp}&sign={sign(stamp, self.secret.reveal())}"

    def body(self, notification: Notification) -> dict[str, Any]:
        # DingTalk's markdown breaks lines only at blank lines
        text = markdown(notification, escape_im, TEXT_BYTES).replace("\n", "\n\n")
        return {
            "msgtype": "markdown",
            "markdown": {"title": escape_im(title(notification)), "text": text},
            "at": {"isAtAll": False},
        }

    def digest_body(self, digest: DigestMessage) -> dict[str, Any]:
        text = digest_markdown(digest, escape_im, TEXT_BYTES).replace("\n", "\n\n")
        return {"msgtype": "markdown", "markdown": {"title": escape_im(digest.title), "text": text},
                "at": {"isAtAll": False}}

    def outcome(self, response: httpx.Response) -> Outcome:
        if response.status_code != 200:
            return from_status(response.status_code, response.text)
        answer = response.json()
        return from_error_code(answer.get("errcode"), answer.get("errmsg"), RATE_LIMITED)
