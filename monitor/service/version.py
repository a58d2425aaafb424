"""The engine's version, from its own API: no engine names it on its /metrics page.

    vllm      GET /version          {"version": "0.33.0"}
    sglang    GET /get_server_info  {..., "version": "0.5.2"}
    tgi       GET /info             {..., "version": "3.3.4"}
    llamacpp  GET /props            {..., "build_info": "b6123-1a2b3c4"}

on the same host and port as its /metrics page. Read when a target comes up and every
VERSION_INTERVAL after (a new version is a restart, which the monitor sees as the target going
down and up, or not, when the restart falls between two scrapes). An engine that does not answer
has no version: not an error, the target keeps its other numbers.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import httpx

from monitor.scrape import FetchedPage, ScrapeError

VERSION_API: dict[str, tuple[str, str]] = {
    "vllm": ("/version", "version"),
    "sglang": ("/get_server_info", "version"),
    "tgi": ("/info", "version"),
    "llamacpp": ("/props", "build_info"),
}
VERSION_INTERVAL = 600.0  # seconds between two reads of a target's version
MAX_VERSION_BYTES = 1 << 20  # SGLang's server info holds every server argument
MAX_VERSION_CHARS = 64


def version_url(metrics_url: str, engine: str) -> str | None:
    """The engine's version endpoint beside its metrics page (`http://h:8000/metrics` ->
    `http://h:8000/version`); None for an engine without one."""
    api = VERSION_API.get(engine)
    if api is None:
        return None
    url = httpx.URL(metrics_url)
    path = url.path[: -len("/metrics")] if url.path.endswith("/metrics") else ""
    return str(url.copy_with(path=path + api[0], query=None))


def parse_version(body: str, engine: str) -> str | None:
    """The version in the engine's answer: a short printable string, or None."""
    api = VERSION_API.get(engine)
    try:
        data = json.loads(body)
    except ValueError:
        return None
    found = data.get(api[1]) if api is not None and isinstance(data, dict) else None
    if not isinstance(found, str | int | float) or isinstance(found, bool):
        return None
    text = str(found).strip()
    return text if text and len(text) <= MAX_VERSION_CHARS and text.isprintable() else None


async def read_version(fetch: Callable[[str], Awaitable[FetchedPage]], metrics_url: str, engine: str) -> str | None:
    """The version, through `fetch` (the target's own connection or the shared client, as its page)."""
    url = version_url(metrics_url, engine)
    if url is None:
        return None
    try:
        page = await fetch(url)
    except ScrapeError:
        return None
    return parse_version(page.text, engine)
