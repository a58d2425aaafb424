"""Collector up/down transitions land in the history (SQLite and PostgreSQL) and survive a restart."""

import asyncio
import time

import httpx
import pytest

from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.conftest import FIXTURES

PAGE = (FIXTURES / "sample_vllm_v1.prom").read_text()


def test_transitions_are_stored_once_and_survive_restart(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERMON_STORAGE__URL")  # this test wants the file, not the tests' in-memory store
    up = {"now": True}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=PAGE) if up["now"] else httpx.Response(503)

    url = store_url
    settings = load_settings(None, {
        "service": {"targets": [{"name": "a", "url": "http://a/metrics"}]},
        "infra": {"nvml": {"enabled": "false"}},
        "storage": {"url": url},
    })
    clock = [time.time()]

    async def run() -> list[dict[str, object]]:
        monitor = Monitor(settings, client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
                          wall=lambda: clock[0])
        for state in (True, False, False, False, True, True):
            up["now"] = state
            await monitor.run_once()
            clock[0] += 15
        events = monitor.status()["recent_events"]
        await monitor.aclose()
        return events

    events = asyncio.run(run())
    service_events = [(e["target"], e["state"], e["error"]) for e in events if e["collector"] == "service"]
    assert service_events == [("a", "up", None), ("a", "down", "HTTP 503")]  # newest first, once each

    async def reopen() -> list[dict[str, object]]:
        monitor = Monitor(settings, client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
        events = monitor.status()["recent_events"]
        await monitor.prune()  # 30 days of retention keep them
        kept = monitor.store.recent_events()
        monitor.store.prune(time.time() + 3600)
        pruned = monitor.store.recent_events()
        await monitor.aclose()
        assert len(kept) == len(events)
        assert pruned == []
        return events

    assert len(asyncio.run(reopen())) == len(events)
