"""Secrets out of every URL the monitor shows: the one place that decides what a shown URL keeps.

A URL in the configuration may carry credentials: `http://user:pass@host/` (userinfo) or
`?token=...&sig=...` (query parameters). Status, logs, errors, the overview page and
`infermon check` show URLs through `safe_url`, and free text that may hold one (an exception
message, a log line) through `redact_urls`; `RedactingFilter` applies the latter to every log
record the handlers write.

    safe_url("https://bob:pw@h:8000/metrics?token=abc&model=x")
    -> "https://h:8000/metrics?token=<redacted>&model=x"
"""

from __future__ import annotations

import logging
import re
from urllib.parse import urlsplit, urlunsplit

REDACTED = "<redacted>"
# Query parameter names that carry a credential: token, key, api_key, password, secret, sig,
# signature, access_token, X-Amz-Signature, auth, session, ... (matched anywhere in the name).
_SECRET_PARAM = re.compile(r"token|key|pass|pwd|secret|sig|auth|credential|session|cookie", re.IGNORECASE)
_URL_IN_TEXT = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]+")
_QUERY_PAIR = re.compile(r"([^&;=]*)(=?)([^&;]*)")


def safe_url(url: str) -> str:
    """The URL without userinfo, and with the values of secret-looking query parameters replaced."""
    try:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
    except ValueError:  # not a URL at all (an invalid target in the config): show nothing of it
        return REDACTED
    query = _QUERY_PAIR.sub(_redact_pair, parts.query) if parts.query else ""
    if not host and parts.scheme and url.startswith(f"{parts.scheme}://"):  # sqlite:///x.db: an empty host, kept
        return f"{parts.scheme}://{parts.path}" + (f"?{query}" if query else "") + \
            (f"#{parts.fragment}" if parts.fragment else "")
    return urlunsplit((parts.scheme, host, parts.path, query, parts.fragment))


def _redact_pair(match: re.Match[str]) -> str:
    name, equals, value = match.groups()
    return f"{name}{equals}{REDACTED}" if equals and value and _SECRET_PARAM.search(name) else match.group(0)


def redact_urls(text: str) -> str:
    """Free text with every URL in it passed through `safe_url`."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda match: safe_url(match.group(0)), text)


class RedactingFilter(logging.Filter):
    """A handler filter: the message and the traceback leave with their URLs redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_urls(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_urls(logging.Formatter().formatException(record.exc_info))
        return True


def redact_logs(logger: logging.Logger | None = None) -> None:
    """Add the filter to every handler of `logger` (the root logger by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
