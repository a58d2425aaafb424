"""Redaction patterns: what is masked, and what is left alone."""

from __future__ import annotations

import pytest

from monitor.config import ConfigError, CustomPattern
from monitor.quality.redact import Redactor
from monitor.settings_check import load_checked_settings

ALL = Redactor(["email", "phone", "id_number", "api_key"])


@pytest.mark.parametrize(("text", "kind"), [
    ("write to zhang.wei+test@example.com.cn today", "email"),
    ("call 138 0013 8000 or", "phone"),
    ("call 13800138000.", "phone"),
    ("tel +86 138-0013-8000", "phone"),
    ("US office (415) 555-0132", "phone"),
    ("ID 11010519491231002X on file", "id_number"),
    ("SSN 123-45-6789", "id_number"),
    ("key sk-proj-AbCdEfGhIjKlMnOpQrStUv123", "api_key"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abcdefghijkl", "api_key"),
    ("aws AKIAIOSFODNN7EXAMPLE", "api_key"),
])
def test_masks(text: str, kind: str) -> None:
    out = ALL(text)
    assert out is not None and f"[REDACTED:{kind}]" in out


@pytest.mark.parametrize("text", ["The year 2026 had 365 days.", "Version 1.2.3 costs $40.", "port 9480"])
def test_leaves_ordinary_numbers(text: str) -> None:
    assert ALL(text) == text


def test_custom_pattern() -> None:
    redact = Redactor(["email", CustomPattern(name="order", pattern=r"ORD-\d{6}")])
    assert redact("order ORD-123456 for a@b.io") == "order [REDACTED:order] for [REDACTED:email]"


def test_config_names_an_unknown_pattern() -> None:
    with pytest.raises(ConfigError, match=r"quality\.redact"):
        load_checked_settings(None, {"quality": {"redact": ["email", "passport"]}})
    with pytest.raises(ConfigError, match=r"quality\.redact"):
        load_checked_settings(None, {"quality": {"redact": [{"name": "x", "pattern": "(unclosed"}]}})
