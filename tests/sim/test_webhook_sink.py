"""The demo's webhook sink: what it got, on its own page and as JSON; and what a short demo says."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from monitor.demo import _short_run_note
from monitor.sim.webhook_sink import create_sink_app
from tests.alerting.alertmanager_payload import am_payload


def test_the_sink_shows_what_was_delivered_newest_first() -> None:
    received: list[dict[str, Any]] = []
    with TestClient(create_sink_app(received)) as client:
        assert "Nothing delivered yet" in client.get("/").text
        firing = am_payload()
        firing["alerts"][0]["annotations"]["runbook"] = "docs/runbooks/GPUHot.md <check fans>"
        assert client.post("/hook", json=firing).json() == {"received": 1}
        assert client.post("/hook", json=am_payload("resolved")).json() == {"received": 1}
        page = client.get("/").text
        assert page.index("resolved GPUHot") < page.index("firing GPUHot")
        assert "summary: GPU 3 is at 87 °C" in page
        assert "runbook: docs/runbooks/GPUHot.md &lt;check fans&gt;" in page  # escaped, as sent
        assert [body["status"] for body in client.get("/received").json()] == ["resolved", "firing"]
    assert len(received) == 2


def test_a_short_demo_says_it_stops_before_the_first_fault() -> None:
    assert "before the first fault" in _short_run_note(120)
    assert _short_run_note(None) == "" and _short_run_note(600) == ""
