"""A restart of a real `infermon serve` (SIGTERM, then kill -9) with an alert firing on each layer
(service, infra, cost, quality): no false "resolved", no second "firing", the same startsAt.

Before the fix the first evaluation after start ran on a page the fresh process had not filled
yet: TargetDown and the others resolved within a second and fired again with a new startsAt."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from monitor.ports import free_port
from monitor.quality.store import QualityStore
from monitor.store.session import Store
from tests.alerting.imserver import BEARER, ImServer
from tests.alerting.test_am_receiver import wait_for
from tests.alerting.test_restart import INFERMON, _healthy

RULES = {"groups": [{"name": "restart", "rules": [
    {"alert": "TargetDown", "expr": "inference_target_up == 0", "labels": {"severity": "critical"}},
    {"alert": "GpuWarm", "expr": "inference_gpu_temperature_celsius > 0", "labels": {"severity": "warning"}},
    {"alert": "SpendRunning", "expr": "inference_cost_usd_per_hour > 0", "labels": {"severity": "warning"}},
    {"alert": "QualityLow", "expr": "inference_quality_score_mean < 3.5", "labels": {"severity": "warning"}},
]}]}
ALERTS = {"TargetDown", "GpuWarm", "SpendRunning", "QualityLow"}
TRACE = Path(__file__).parents[2] / "monitor" / "data" / "nvml_h200_trace.json"


def write_config(tmp: Path, im: ImServer, port: int) -> Path:
    (tmp / "rules.yml").write_text(yaml.safe_dump(RULES))
    db = tmp / "infermon.db"
    store = Store(f"sqlite:///{db}")  # a finished quality run with a low score, as yesterday's run left it
    quality = QualityStore(store.engine)
    run = quality.create_run("2026-01-01", "qwen3-8b", time.time() - 3600, 100, [])
    quality.finish_run(run, {"score_mean": 2.5, "samples": 100}, time.time() - 3000)
    store.close()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "info"},
        "storage": {"url": f"sqlite:///{db}"},
        "service": {"scrape_interval": "1s", "scrape_timeout": "500ms",
                    "targets": [{"name": "gone", "url": f"http://127.0.0.1:{free_port()}/metrics"}]},
        "infra": {"interval": "1s", "nvml": {"enabled": "false"}, "replay": {"file": str(TRACE)}},
        "cost": {"gpu_prices": {"H200": {"usd_per_hour": 3.5}},
                 "static_gpus": [{"model": "NVIDIA H200", "count": 8, "node": "rack-3"}]},
        "quality": {"refresh_interval": "1s"},
        "alerting": {
            "evaluation_interval": "1s",
            "rules_files": [str(tmp / "rules.yml")],
            "receivers": [{"name": "ops", "type": "webhook", "url": im.url("webhook"), "token": BEARER,
                           "group_wait": "100ms", "group_interval": "100ms"}],
        },
    }
    path = tmp / "infermon.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def serve(config: Path, port: int, output: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERMON_")}
    with output.open("ab") as out:
        proc = subprocess.Popen([str(INFERMON), "serve", "--config", str(config)], stdout=out, stderr=out, env=env)
    try:
        wait_for(lambda: _healthy(port) or proc.poll() is not None, 60)
        assert proc.poll() is None, output.read_text()
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(15)


def notified(im: ImServer) -> list[tuple[str, str, str]]:
    """(alertname, status, startsAt) of every alert in every accepted webhook message."""
    return [(a["labels"]["alertname"], a["status"], a["startsAt"])
            for message in im.accepted("webhook") for a in message["alerts"]]


def alerting(port: int) -> dict[str, Any]:
    return dict(httpx.get(f"http://127.0.0.1:{port}/api/v1/status", timeout=5).json()["alerting"])


def settled(port: int) -> None:
    """Every rule evaluated on collected series, then two evaluations more."""
    wait_for(lambda: alerting(port)["last_evaluation"] is not None
             and alerting(port)["waiting_for_first_collection"] == [], 30)
    since = alerting(port)["last_evaluation"]
    wait_for(lambda: alerting(port)["last_evaluation"] >= since + 2, 15)


@pytest.mark.long
def test_restart_keeps_firing_alerts_without_resolving_or_refiring(tmp_path: Path) -> None:
    port = free_port()
    output = tmp_path / "infermon.out"
    with ImServer() as im:
        config = write_config(tmp_path, im, port)
        with serve(config, port, output) as proc:
            wait_for(lambda: {name for name, status, _ in notified(im) if status == "firing"} == ALERTS, 45)
            settled(port)
            first = notified(im)
            assert sorted(name for name, _, _ in first) == sorted(ALERTS), first  # once each
            starts = {name: starts_at for name, _, starts_at in first}
            proc.send_signal(signal.SIGTERM)
            proc.wait(15)
        for stop in (signal.SIGKILL, None):
            with serve(config, port, output) as proc:
                settled(port)
                assert alerting(port)["firing"] == len(ALERTS)
                assert notified(im) == first, output.read_text()[-3000:]  # no resolved, no second firing
                transitions = httpx.get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5).json()["transitions"]
                assert sorted(t["labels"]["alertname"] for t in transitions) == sorted(ALERTS)
                assert {t["status"] for t in transitions} == {"firing"}
                active = httpx.get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5).json()["active"]
                assert {a["labels"]["alertname"]: a["state"] for a in active} == dict.fromkeys(ALERTS, "firing")
                if stop is not None:
                    proc.send_signal(stop)
                    proc.wait(15)
        assert {name: starts_at for name, _, starts_at in notified(im)} == starts
    assert "restored 4 pending/firing alert(s)" in output.read_text()
