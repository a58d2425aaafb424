"""Slack incoming webhook: a header block with the title, one mrkdwn section per alert.

    {"text": "[FIRING:1] GPUHot", "blocks": [{"type": "header", ...}, {"type": "section", ...}]}

Slack answers `ok` with 200, and a 4xx/5xx status with a reason (`invalid_payload`, 429 when
rate limited). Limits: a section's text ≤ 3000 characters, a message ≤ 50 blocks, and about one
message per second per webhook.
"""

from __future__ import annotations

from typing import Any

from monitor.alerting.receivers.base import DigestMessage, HttpReceiver, Notification, RateLimit
from monitor.alerting.receivers.text import alert_section, title

SECTION_CHARS = 3000
MAX_SECTIONS = 48  # 50 blocks: the header, the sections, one note


def escape_slack(value: str) -> str:
    """Slack's own escaping: `<!channel>`, `<@U123>` and links become plain text."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def blocks(notification: Notification) -> list[dict[str, Any]]:
    heading = title(notification)[:150]
    out: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": heading}}]
    for alert in notification.alerts[:MAX_SECTIONS]:
        text = alert_section(alert, escape_slack, bold="*")
        if len(text) > SECTION_CHARS:
            text = text[: SECTION_CHARS - 14] + "\n… (truncated)"
        out.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    hidden = max(0, len(notification.alerts) - MAX_SECTIONS) + notification.truncated_alerts
    if hidden:
        note = f"… {hidden} more alert(s) not shown (message size limit)"
        out.append({"type": "context", "elements": [{"type": "mrkdwn", "text": note}]})
    return out


class SlackReceiver(HttpReceiver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rate_limit = RateLimit(1, 1.0)

    def body(self, notification: Notification) -> dict[str, Any]:
        return {"text": escape_slack(title(notification)), "blocks": blocks(notification)}

    def digest_body(self, digest: DigestMessage) -> dict[str, Any]:
        return {"text": escape_slack(digest.title), "blocks": digest_blocks(digest)}


def digest_blocks(digest: DigestMessage) -> list[dict[str, Any]]:
    """The digest's text, one preformatted section per model (its columns line up), as many as fit."""
    out: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": digest.title[:150]}}]
    models = [block for block in digest.text.strip("\n").split("\n\n") if block.strip()]
    for block in models[:MAX_SECTIONS]:
        text = escape_slack(block)[: SECTION_CHARS - 20]
        out.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{text}```"}})
    if len(models) > MAX_SECTIONS:
        note = f"… {len(models) - MAX_SECTIONS} more block(s) not shown: `infermon digest --week` has them"
        out.append({"type": "context", "elements": [{"type": "mrkdwn", "text": note}]})
    return out
