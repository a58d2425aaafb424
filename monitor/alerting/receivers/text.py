"""The human message every IM receiver sends: a title, then per alert the summary first, the
context lines (`context`, `probable_cause` when present), the description, the labels.

    [FIRING:2] GPUHot                               <- title, as Alertmanager's default template
    **GPU 3 on node-1 is at 87 °C**                 <- summary
    context: …                                      <- extra annotations, when the alert has them
    Temperature above 80 °C for 5m …                <- description
    alertname=GPUHot gpu=3 node=node-1 severity=…   <- labels

Values come from labels, which anyone who can push a metric controls: each platform's escape
function neutralises mentions (`@all`, `<at user_id="all">`, `<!channel>`) before they are sent,
and on the Markdown platforms links and images (`[Re-login](http://…)`, `![](http://…)`): a
label value must not put a clickable phishing link or a tracking pixel into the chat.
"""

from __future__ import annotations

from collections.abc import Callable

from monitor.alerting.model import Alert
from monitor.alerting.receivers.base import DigestMessage, Notification

Escape = Callable[[str], str]
CONTEXT_ANNOTATIONS = ("context", "probable_cause")
# Square brackets too: without `[...]` there is no Markdown link, image or reference definition.
_FULLWIDTH = str.maketrans({"@": "＠", "<": "＜", ">": "＞", "[": "［", "]": "］"})


def escape_im(value: str) -> str:
    """Feishu/DingTalk/WeCom: `@` and angle brackets turn into look-alikes that mention nobody,
    square brackets into look-alikes that open no link (`[text](url)`, `![](url)`)."""
    return value.translate(_FULLWIDTH)


def title(notification: Notification) -> str:
    count = f":{len(notification.firing)}" if notification.firing else ""
    names = " ".join(notification.group_labels[k] for k in sorted(notification.group_labels))
    return f"[{notification.status.upper()}{count}] {names}".rstrip()


def alert_section(alert: Alert, escape: Escape, bold: str = "**") -> str:
    notes = alert.annotations
    lines = []
    summary = notes.get("summary") or alert.name
    marker = "" if alert.status == "firing" else "[resolved] "
    lines.append(f"{bold}{marker}{escape(summary)}{bold}")
    lines += [f"{key}: {escape(notes[key])}" for key in CONTEXT_ANNOTATIONS if notes.get(key)]
    if notes.get("description"):
        lines.append(escape(notes["description"]))
    if notes.get("runbook"):
        lines.append(f"runbook: {escape(notes['runbook'])}")
    lines.append(" ".join(f"{k}={escape(v)}" for k, v in sorted(alert.labels.items())))
    return "\n".join(lines)


def fit(head: str, sections: list[str], limit_bytes: int, truncated_alerts: int = 0) -> str:
    """`head` and as many whole sections as fit in `limit_bytes` (UTF-8), with a note for the rest."""
    out = head
    for index, section in enumerate(sections):
        left = len(sections) - index + truncated_alerts
        note = f"\n\n… {left} more alert(s) not shown (message size limit)"
        candidate = f"{out}\n\n{section}"
        if _size(candidate) + _size(note) > limit_bytes:
            if index == 0:  # even one alert is too long: cut it, say so
                cut_note = "\n… (truncated: message size limit)"
                return _cut(candidate, limit_bytes - _size(cut_note)) + cut_note
            return out + note
        out = candidate
    if truncated_alerts:
        out += f"\n\n… {truncated_alerts} more alert(s) not shown"
    return out


def _size(text: str) -> int:
    return len(text.encode())


def _cut(text: str, limit_bytes: int) -> str:
    return text.encode()[: max(0, limit_bytes)].decode(errors="ignore")


def markdown(notification: Notification, escape: Escape, limit_bytes: int, bold: str = "**") -> str:
    sections = [alert_section(a, escape, bold) for a in notification.alerts]
    return fit(f"{bold}{escape(title(notification))}{bold}", sections, limit_bytes, notification.truncated_alerts)


def digest_markdown(digest: DigestMessage, escape: Escape, limit_bytes: int, bold: str = "**") -> str:
    """The weekly digest for an IM bot: its title, then its text (model names come from labels:
    escaped as alert text is), cut at a model's block to fit, with a note saying so."""
    blocks = [escape(block) for block in digest.text.strip("\n").split("\n\n") if block.strip()]
    out = f"{bold}{escape(digest.title)}{bold}"
    note = "\n\n… (cut: message size limit; `infermon digest --week` has it all)"
    for index, block in enumerate(blocks):
        candidate = f"{out}\n\n{block}"
        if _size(candidate) + _size(note) > limit_bytes:
            return _cut(candidate, limit_bytes - _size(note)) + note if index == 0 else out + note
        out = candidate
    return out
