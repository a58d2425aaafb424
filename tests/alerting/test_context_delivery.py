"""Where the context goes: the firing and resolved transitions, GET /api/v1/alerts (across a
restart), and the fleet path, where the real Alertmanager posts a Prometheus-evaluated alert to
the monitor's receiver and the receivers get it with the monitor's evidence, as one annotation
in an Alertmanager v4 payload that still parses as one."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from monitor.alerting.am_receiver import AmPayload
from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.alerting.contextviews import assert_context_matches
from tests.alerting.helpers import receiver_data
from tests.alerting.imserver import KINDS, ImServer
from tests.alerting.test_alertmanager import alertmanager
from tests.alerting.test_am_receiver import API_TOKEN, wait_for
from tests.alerting.test_evaluator import RecordingSink
from tests.alerting.test_monitor_alerts import PAGE, Engine, cycles, make_monitor
from tests.support.appserver import serve_app
from tests.support.pageserver import Page, PageServer

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# What Alertmanager's webhook (v4) carries, at the top and per alert: nothing more, nothing less.
PAYLOAD_KEYS = {"version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels", "commonLabels",
                "commonAnnotations", "externalURL", "alerts"}
ALERT_KEYS = {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}


def test_target_down_context_on_firing_resolved_api_and_after_restart(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERMON_STORAGE__URL", f"sqlite:///{tmp_path / 'infermon.db'}")
    engine, sink, clock = Engine(), RecordingSink(), [1_767_300_000.0]

    async def first_life() -> None:
        monitor = make_monitor(engine, sink, clock)
        await cycles(monitor, clock, 5)
        await monitor.aclose()

    asyncio.run(first_life())
    [firing] = [a for a in sink.sent if a.name == "TargetDown"]
    assert firing.annotations["context"] == "vllm-a up: no (the metrics page does not answer)"
    assert firing.annotations["probable_cause"].startswith("target_down: vllm-a does not answer its metrics page")
    assert firing.annotations["summary"] == "Engine target vllm-a cannot be scraped"

    restarted = make_monitor(engine, sink, clock)  # the same SQLite file: the evidence it fired with stays
    asyncio.run(cycles(restarted, clock, 1))
    with serve_app(restarted) as url:
        body = httpx.get(f"{url}/api/v1/alerts", timeout=5).json()
    [active] = [a for a in body["active"] if a["labels"]["alertname"] == "TargetDown"]
    assert active["state"] == "firing" and active["annotations"] == dict(firing.annotations)
    engine.up = True

    third = make_monitor(engine, sink, clock)  # (serving closed the second one's client)

    async def recover() -> None:
        await cycles(third, clock, 1)
        await third.aclose()

    asyncio.run(recover())
    resolved = sink.sent[-1]
    assert resolved.name == "TargetDown" and resolved.status == "resolved"
    assert resolved.annotations == firing.annotations  # what it was about, not the calm after
    assert third.alerting is not None and third.alerting.explained == {}


def _posted(ends: datetime | None = None) -> list[dict[str, Any]]:
    start = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    out = []
    for target in ("vllm-a", "not-ours"):
        alert: dict[str, Any] = {
            "labels": {"alertname": "TTFTP99High", "severity": "critical", "target": target, "model": MODEL},
            "annotations": {"summary": f"P99 time to first token above 1 s on {target}"},
            "startsAt": start.isoformat(), "generatorURL": "http://prometheus:9090/graph",
        }
        if ends is not None:
            alert["endsAt"] = ends.isoformat()
        out.append(alert)
    return out


def test_alertmanager_posted_alert_gains_the_monitors_context(tmp_path: Path) -> None:
    with PageServer() as pages, ImServer() as im:
        pages.set("/metrics", Page(PAGE))
        monitor = Monitor(load_settings(None, {
            "alerting": {"receivers": [receiver_data(im, kind) for kind in KINDS]}, "api": {"token": API_TOKEN},
            "service": {"targets": [{"name": "vllm-a", "url": pages.url("/metrics")}]},
            "infra": {"nvml": {"enabled": "false"}},
        }))
        with serve_app(monitor) as url:
            wait_for(lambda: getattr(monitor.service.view.targets.get("vllm-a"), "up", False))
            with alertmanager(tmp_path, url) as am:
                assert httpx.post(f"{am}/api/v2/alerts", json=_posted(), timeout=5).status_code == 200
                # Both alerts, in one notification or two (beside two CPU hogs Alertmanager's
                # groups reached the monitor apart, and its delivery sent them apart)
                wait_for(lambda: all(im.accepted(k) for k in KINDS) and len(_webhook_alerts(im)) >= 2, 30)
                metrics = monitor.metrics_text().decode()
    for body in im.accepted("webhook"):
        assert set(body) == PAYLOAD_KEYS and all(set(a) == ALERT_KEYS for a in body["alerts"])
        assert all(isinstance(v, str) for a in body["alerts"] for v in a["annotations"].values())
        AmPayload.model_validate(body)  # a consumer of Alertmanager webhooks still reads it
        assert "context" not in body["commonAnnotations"] or len(body["alerts"]) == 1
    by_target = {a["labels"]["target"]: a["annotations"] for a in _webhook_alerts(im)}
    ours = by_target["vllm-a"]
    # the posted alert has no window: its facts are the shortest window's, what holds now
    assert f"vllm-a model={MODEL} window=1m requests running: 12" in ours["context"].splitlines()
    assert assert_context_matches(ours["context"], metrics) >= 3
    assert ours["probable_cause"].split(":", 1)[0] == "unknown"
    assert "context" not in by_target["not-ours"] and "probable_cause" not in by_target["not-ours"]
    slack = str(im.accepted("slack"))
    assert "probable_cause: unknown" in slack and "context: vllm-a model=" in slack


def _webhook_alerts(im: ImServer) -> list[dict[str, Any]]:
    return [alert for body in im.accepted("webhook") for alert in body["alerts"]]
