"""Masking of personal data and secrets before a sample is stored or sent to the judge.

Each pattern replaces a match with `[REDACTED:<name>]`, so the judge still sees that something
was there (an answer that leaks an e-mail is a worse answer) but never what.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# Order matters: API keys and ID numbers before phone numbers (a long digit run is both).
BUILTIN_PATTERNS: dict[str, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "api_key": (
        r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}"  # OpenAI-style and the many look-alikes
        r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key id
        r"|\bgh[pousr]_[A-Za-z0-9]{30,}"  # GitHub tokens
        r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack tokens
        r"|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{20,}"
    ),
    # Chinese resident ID (18 characters, last may be X) and US SSN.
    "id_number": r"\b\d{6}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx]\b|\b\d{3}-\d{2}-\d{4}\b",
    # Chinese mobile numbers, and international/North-American numbers written with separators.
    "phone": r"(?<!\d)(?:\+?86[ -]?)?1[3-9]\d[ -]?\d{4}[ -]?\d{4}(?!\d)"
    r"|(?<![\w+])\+\d{1,3}[ .-]?\(?\d{1,4}\)?(?:[ .-]?\d{2,4}){2,4}(?!\d)"
    r"|(?<!\d)\(?\d{3}\)?[ .-]\d{3}[ .-]\d{4}(?!\d)",
}


class Redactor:
    def __init__(self, patterns: Sequence[str | Any]) -> None:
        """`patterns`: builtin names, or objects with `name` and `pattern` (custom regexes)."""
        compiled: list[tuple[str, re.Pattern[str]]] = []
        for entry in patterns:
            if isinstance(entry, str):
                compiled.append((entry, re.compile(BUILTIN_PATTERNS[entry])))
            else:
                compiled.append((entry.name, re.compile(entry.pattern)))
        order = list(BUILTIN_PATTERNS)
        # Builtins in their safe order, custom patterns first (they are the most specific).
        compiled.sort(key=lambda item: order.index(item[0]) if item[0] in order else -1)
        self.patterns = compiled

    def __call__(self, text: str | None) -> str | None:
        if not text:
            return text
        for name, pattern in self.patterns:
            text = pattern.sub(f"[REDACTED:{name}]", text)
        return text
