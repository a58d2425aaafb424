"""The system Chromium under Playwright: headless, no background networking, a fresh profile,
no browser download (`executable_path`). Every request the page makes is recorded."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-default-apps", "--disable-extensions"]


def chromium_path() -> str:
    path = os.environ.get("INFERMON_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "chromium not found: install the Debian package 'chromium' (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@dataclass
class Seen:
    requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)


@contextmanager
def browser_page(width: int = 1280, height: int = 900) -> Iterator[tuple[Any, Seen]]:
    sync_api = pytest.importorskip("playwright.sync_api")
    seen = Seen()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("request", lambda request: seen.requests.append(request.url))
            page.on("console", lambda msg: seen.console_errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda error: seen.console_errors.append(str(error)))
            yield page, seen
        finally:
            browser.close()


def artifacts_dir(fallback: Any) -> Any:
    """Where screenshots go: $INFERMON_TEST_ARTIFACTS (CI keeps it), else the test's tmp_path."""
    chosen = os.environ.get("INFERMON_TEST_ARTIFACTS")
    if not chosen:
        return fallback
    os.makedirs(chosen, exist_ok=True)
    from pathlib import Path

    return Path(chosen)
