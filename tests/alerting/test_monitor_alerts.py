"""The evaluator inside the monitor: rules applied to what /metrics exports, transitions to the
sink, GET /api/v1/alerts, the firing-alerts metric, and a restart on the same SQLite file."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import yaml

from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.alerting.test_evaluator import RecordingSink
from tests.conftest import FIXTURES
from tests.support.appserver import serve_app

PAGE = (FIXTURES / "sample_vllm_v1.prom").read_text()


class Engine:
    """A target that is down (HTTP 503) until told otherwise."""

    def __init__(self) -> None:
        self.up = False

    def handler(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=PAGE) if self.up else httpx.Response(503, text="unavailable")


def make_monitor(engine: Engine, sink: RecordingSink, clock: list[float], **kwargs: object) -> Monitor:
    settings = load_settings(None, {
        "infra": {"nvml": {"enabled": "false"}},
        "service": {"targets": [{"name": "vllm-a", "url": "http://a/metrics"}]},
        "alerting": {"evaluation_interval": "15s"},
    })
    client = httpx.AsyncClient(transport=httpx.MockTransport(engine.handler))
    return Monitor(settings, client=client, wall=lambda: clock[0], sink=sink, **kwargs)  # type: ignore[arg-type]


async def cycles(monitor: Monitor, clock: list[float], count: int) -> None:
    for _ in range(count):
        await monitor.run_once()
        clock[0] += 15.0


def target_down(sink: RecordingSink) -> list[str]:
    return [a.status for a in sink.sent if a.name == "TargetDown"]


def test_target_down_fires_once_across_a_restart_and_resolves(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERMON_STORAGE__URL", store_url)
    engine, sink, clock = Engine(), RecordingSink(), [1_767_300_000.0]

    async def run() -> None:
        monitor = make_monitor(engine, sink, clock)
        await cycles(monitor, clock, 4)  # 0, 15, 30, 45 s: pending
        assert target_down(sink) == [] and monitor.alerting is not None
        assert [a["state"] for a in monitor.alerting.active()] == ["pending"]
        await cycles(monitor, clock, 1)  # 60 s: for 1m has passed
        assert target_down(sink) == ["firing"]
        [alert] = [a for a in sink.sent if a.name == "TargetDown"]
        assert alert.labels == {"alertname": "TargetDown", "target": "vllm-a", "severity": "critical",
                                "layer": "service"}
        assert alert.annotations["summary"] == "Engine target vllm-a cannot be scraped"
        assert 'inference_monitor_alerts_firing{severity="critical"} 1.0' in monitor.metrics_text().decode()
        await monitor.aclose()

        restarted = make_monitor(engine, sink, clock)  # the same SQLite file
        await cycles(restarted, clock, 3)
        assert target_down(sink) == ["firing"]  # still firing, not announced again
        engine.up = True
        await cycles(restarted, clock, 1)
        assert target_down(sink) == ["firing", "resolved"]
        assert sink.sent[-1].starts_at == alert.starts_at
        await restarted.aclose()

    asyncio.run(run())


def test_api_lists_active_alerts_and_injected_transitions() -> None:
    engine, sink, clock = Engine(), RecordingSink(), [1_767_300_000.0]
    recent = [{"fingerprint": "abc", "status": "firing", "receivers": {"ops": "delivered"}}]
    monitor = make_monitor(engine, sink, clock, transitions=lambda: recent)
    asyncio.run(cycles(monitor, clock, 5))
    with serve_app(monitor) as url:
        body = httpx.get(f"{url}/api/v1/alerts", timeout=5).json()
        status = httpx.get(f"{url}/api/v1/status", timeout=5).json()["alerting"]
    assert body["transitions"] == recent
    [active] = [a for a in body["active"] if a["labels"]["alertname"] == "TargetDown"]
    assert active["state"] == "firing" and active["value"] == 0
    assert active["active_at"] == "2026-01-01T20:40:00Z" and active["fired_at"] == "2026-01-01T20:41:00Z"
    assert set(active) == {"labels", "annotations", "state", "value", "active_at", "fired_at"}
    shipped = sum(len(g["rules"]) for f in load_settings().alerting.rules_files
                  for g in yaml.safe_load(f.read_text())["groups"])
    assert status["rules"] == shipped and status["firing"] >= 1 and status["left_to_prometheus"] == []
