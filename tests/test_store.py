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


def test_alert_states_are_inserted_updated_and_deleted_in_bulk(store_url: str) -> None:
    from monitor.alerting.store import StoredAlert, load_alert_states, save_alert_states
    from monitor.store.session import Store

    def alert(n: int, state: str = "pending", fired: float | None = None) -> StoredAlert:
        return StoredAlert("rules.yml/g/TTFTP99High", f"fp{n:014d}", {"alertname": "TTFTP99High", "target": f"t{n}"},
                           {"summary": f"t{n} slow"}, state, 100.0 + n, fired, None, 1.5 + n)

    store = Store(store_url)
    try:
        save_alert_states(store.engine, [alert(n) for n in range(2000)], [])
        # Firing now: the same rows updated (every column but the key), one gone, one new.
        save_alert_states(store.engine, [alert(n, "firing", 400.0 + n) for n in range(1, 2000)] + [alert(5000)],
                          [("rules.yml/g/TTFTP99High", f"fp{0:014d}")])
        rows = {row.fingerprint: row for row in load_alert_states(store.engine)}
        assert sorted(rows) == [f"fp{n:014d}" for n in [*range(1, 2000), 5000]]
        assert rows[f"fp{7:014d}"] == alert(7, "firing", 407.0) and rows[f"fp{5000:014d}"] == alert(5000)
        save_alert_states(store.engine, [], [])  # nothing to do: nothing changes
        assert len(load_alert_states(store.engine)) == 2000
    finally:
        store.close()
