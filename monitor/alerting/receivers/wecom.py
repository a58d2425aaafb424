"""WeCom (企业微信) group bot: a markdown message of at most 4096 bytes.

    POST https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…
    {"msgtype": "markdown", "markdown": {"content": "**[FIRING:1] GPUHot**\\n\\n**…**"}}

WeCom answers HTTP 200 with `{"errcode": 0, "errmsg": "ok"}` or a non-zero errcode (93000 bad
key, 45009 over the limit of 20 messages a minute, -1 system busy). Mentions in markdown are
`<@userid>`; `@` and angle brackets from label values are escaped.
"""

from __future__ import annotations

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
from monitor.alerting.receivers.text import digest_markdown, escape_im, markdown

CONTENT_BYTES = 4096
RATE_LIMITED = frozenset({45009, -1})


class WeComReceiver(HttpReceiver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rate_limit = RateLimit(20, 60.0)

    def body(self, notification: Notification) -> dict[str, Any]:
        return {"msgtype": "markdown", "markdown": {"content": markdown(notification, escape_im, CONTENT_BYTES)}}

    def digest_body(self, digest: DigestMessage) -> dict[str, Any]:
        return {"msgtype": "markdown", "markdown": {"content": digest_markdown(digest, escape_im, CONTENT_BYTES)}}

    def outcome(self, response: httpx.Response) -> Outcome:
        if response.status_code != 200:
            return from_status(response.status_code, response.text)
        answer = response.json()
        return from_error_code(answer.get("errcode"), answer.get("errmsg"), RATE_LIMITED)
