"""The API key reaches the server and nothing else: not the logs, not /api/v1/status, not /metrics;
and the running app probes on its own schedule and shows the canary's state in its status."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import httpx
import pytest

from tests.canary.conftest import MODEL, canary_monitor, probe
from tests.support.appserver import serve_app
from tests.support.pageserver import Page, PageServer

SECRET = "sk-canary-7f3a9c1e5b"


def test_api_key_stays_secret(start_sim, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CANARY_TEST_KEY", SECRET)
    sim = start_sim()
    # A gateway that rejects the key and echoes it back, as some do.
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {SECRET}.", "type": "invalid_request_error"}})
    with PageServer() as gateway:
        gateway.set("/v1/chat/completions", Page(body, status=401, content_type="application/json"))
        monitor = canary_monitor([probe("rejected", gateway.url("/v1"), api_key_env="CANARY_TEST_KEY"),
                                  probe("accepted", f"{sim.url}/v1", api_key_env="CANARY_TEST_KEY")])

        async def run() -> tuple[dict[str, object], bytes]:
            try:
                for name in ("rejected", "accepted"):
                    await monitor.canary.probe_once(name)
                return monitor.status(), monitor.metrics_text()
            finally:
                await monitor.aclose()

        with caplog.at_level(logging.DEBUG):
            status, metrics = asyncio.run(run())
        sent = [r.headers for r in gateway.requests]
    probes = status["layers"]["canary"]["probes"]  # type: ignore[index]
    assert [(p["name"], p["outcome"]) for p in probes] == [("rejected", "http_4xx"), ("accepted", "ok")]
    assert probes[0]["detail"] == "HTTP 401: Incorrect API key provided: <secret>."
    assert probes[0]["api_key_env"] == "CANARY_TEST_KEY"
    for text in (json.dumps(status), metrics.decode(), caplog.text):
        assert SECRET not in text
    assert "<secret>" in caplog.text  # the one failure line, scrubbed
    # The key still reaches the server, as a bearer token, with the canary's own header.
    assert sent and all(h.get("authorization") == f"Bearer {SECRET}" for h in sent)
    assert all(h.get("x-infermon-canary") == "rejected" for h in sent)


def test_no_key_configured_sends_no_key_of_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    # OPENAI_API_KEY in the monitor's environment is for something else: never sent to a probed server.
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with PageServer() as gateway:
        gateway.set("/v1/chat/completions", Page("{}", status=503, content_type="application/json"))
        monitor = canary_monitor([probe("p", gateway.url("/v1"))])

        async def run() -> None:
            try:
                await monitor.canary.probe_once("p")
            finally:
                await monitor.aclose()

        asyncio.run(run())
        sent = [r.headers for r in gateway.requests]
    assert sent and all(SECRET not in json.dumps(h) for h in sent)


def test_the_app_probes_on_schedule_and_status_shows_it(start_sim) -> None:
    sim = start_sim()
    monitor = canary_monitor([probe("chat", f"{sim.url}/v1", interval="2s", timeout="2s", target="sim",
                                    expect="simulated")], targets={"sim": sim.metrics_url},
                             service={"scrape_interval": "1s"})
    with serve_app(monitor) as url:
        deadline = time.monotonic() + 20
        while True:
            canary = httpx.get(f"{url}/api/v1/status", timeout=5).json()["layers"]["canary"]
            row = canary["probes"][0]
            if row["probes"].get("ok", 0) >= 2 and row["ttft_gap_seconds"] is not None:
                break
            assert time.monotonic() < deadline, canary
            time.sleep(0.2)
        metrics = httpx.get(f"{url}/metrics", timeout=5).text
        ready = httpx.get(f"{url}/readyz", timeout=5).status_code
    assert canary["user"] == "infermon-canary" and canary["header"] == "X-Infermon-Canary"
    assert row["outcome"] == "ok" and row["up"] is True and row["http_status"] == 200
    assert row["base_url"] == f"{sim.url}/v1" and row["model"] == MODEL and row["target"] == "sim"
    assert row["consecutive_failures"] == 0 and row["skipped_slots"] == 0
    assert f'inference_canary_up{{model="{MODEL}",probe="chat"}} 1.0' in metrics
    assert f'inference_canary_ttft_gap_seconds{{model="{MODEL}",probe="chat",target="sim"}}' in metrics
    assert ready == 200
