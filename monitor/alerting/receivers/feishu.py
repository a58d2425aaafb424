"""Feishu/Lark custom bot: an interactive card (title header, lark_md body).

    {"timestamp": "1764500000", "sign": "…", "msg_type": "interactive",
     "card": {"header": {"title": {"tag": "plain_text", "content": "[FIRING:1] GPUHot"}, "template": "red"},
              "elements": [{"tag": "div", "text": {"tag": "lark_md", "content": "**…**"}}]}}

Signing (optional): timestamp in seconds; HMAC-SHA256 keyed with `timestamp + "\\n" + secret`
over an empty message, base64; both go in the body. Feishu answers HTTP 200 with
`{"code": 0, "msg": "success"}` or a non-zero code (19021 bad signature, 11232 rate limited).
Limits: 5 messages a second (100 a minute) per bot, a request body ≤ 20 KB.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Any

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

BODY_BYTES = 18_000  # of the 20 KB a request may carry, leaving room for the card's JSON
RATE_LIMITED = frozenset({11232})  # "frequency limited"


def sign(timestamp: int, secret: str) -> str:
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


class FeishuReceiver(HttpReceiver):
    clock: Callable[[], float] = time.time

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rate_limit = RateLimit(5, 1.0)

    def body(self, notification: Notification) -> dict[str, Any]:
        content = markdown(notification, escape_im, BODY_BYTES)
        template = "red" if notification.status == "firing" else "green"
        return self._card(title(notification), template, content)

    def digest_body(self, digest: DigestMessage) -> dict[str, Any]:
        return self._card(digest.title, "blue", digest_markdown(digest, escape_im, BODY_BYTES))

    def _card(self, heading: str, template: str, content: str) -> dict[str, Any]:
        card = {
            "header": {"title": {"tag": "plain_text", "content": escape_im(heading)}, "template": template},
            "elements": [{"tag": "div", "text": {"tag": "lark_md", "content": content}}],
        }
        out: dict[str, Any] = {"msg_type": "interactive", "card": card}
        if self.secret is not None:
            stamp = int(self.clock())
            out = {"timestamp": str(stamp), "sign": sign(stamp, self.secret.reveal()), **out}
        return out

    def outcome(self, response: httpx.Response) -> Outcome:
        if response.status_code != 200:
            return from_status(response.status_code, response.text)
        answer = response.json()
        code = answer.get("code", answer.get("StatusCode"))
        return from_error_code(code, answer.get("msg", answer.get("StatusMessage")), RATE_LIMITED)
