"""Two real `infermon serve` processes on one real PostgreSQL database, each on its own port, as
at fleet scale: every notification reaches the (loopback) webhook once, the Alertmanager receiver
takes the same payload from both and sends it once, the spend ledger counts each interval once,
and after `kill -9` of one replica the other delivers what the dead one had queued, and more."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, text

from monitor.ports import free_port
from tests.alerting.alertmanager_payload import am_payload
from tests.alerting.imserver import BEARER, ImServer
from tests.alerting.test_am_receiver import API_TOKEN, wait_for

INFERMON = Path(sys.executable).parent / "infermon"
RATE = 8 * 3.5  # eight static H200s at $3.5 an hour, USD per hour
RULES = {"groups": [{"name": "replicas", "rules": [{
    "alert": "EngineDown", "expr": 'inference_target_up{target="gone"} < 1',
    "labels": {"severity": "critical"}, "annotations": {"summary": "engine gone"},
}]}]}


def write_config(tmp: Path, im: ImServer, port: int, database: str) -> Path:
    rules = tmp / "rules.yml"
    rules.write_text(yaml.safe_dump(RULES))
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"url": database},
        "infra": {"nvml": {"enabled": "false"}},
        # a target nobody listens on: EngineDown fires on both replicas, each on its own clock
        "service": {"scrape_interval": "1s", "scrape_timeout": "500ms",
                    "targets": [{"name": "gone", "url": f"http://127.0.0.1:{free_port()}/metrics"}]},
        "cost": {"gpu_prices": {"H200": {"usd_per_hour": 3.5}},
                 "static_gpus": [{"model": "NVIDIA H200", "count": 8, "node": "rack-1"}]},
        "alerting": {
            "rules_files": [str(rules)], "evaluation_interval": "1s",
            "receivers": [{"name": "ops", "type": "webhook", "url": im.url("webhook"), "token": BEARER,
                           "group_wait": "1s", "group_interval": "1s", "timeout": "2s"}],
        },
    }
    path = tmp / f"infermon-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def replica(config: Path, output: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERMON_")}
    env["INFERMON_API__TOKEN"] = API_TOKEN
    with output.open("ab") as out:
        proc = subprocess.Popen([str(INFERMON), "serve", "--config", str(config)], stdout=out, stderr=out, env=env)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(15)


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def post_alertmanager(port: int, **labels: str) -> None:
    response = httpx.post(f"http://127.0.0.1:{port}/api/v1/alertmanager", json=am_payload(**labels),
                          headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=10)
    assert response.status_code == 200, response.text


def delivered(im: ImServer) -> Counter[tuple[str, str]]:
    """(alertname, status) of every alert in every message the webhook accepted."""
    return Counter((a["labels"]["alertname"], a["status"]) for body in im.accepted("webhook") for a in body["alerts"])


def fleet_spend(database: str) -> tuple[float, float]:
    engine = create_engine(database)
    try:
        with engine.connect() as conn:
            usd, updated = conn.execute(text("SELECT usd, updated_ts FROM cost_totals WHERE scope = 'fleet'")).one()
        return float(usd), float(updated)
    finally:
        engine.dispose()


@pytest.mark.long
def test_two_replicas_on_one_postgres(pg_url: str, tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    logs = [tmp_path / "a.out", tmp_path / "b.out"]
    with ImServer() as im, ExitStack() as stack:
        configs = [write_config(tmp_path, im, port, pg_url) for port in ports]
        started = time.time()
        a, b = (stack.enter_context(replica(c, log)) for c, log in zip(configs, logs, strict=True))
        wait_for(lambda: all(healthy(p) for p in ports) or None not in (a.poll(), b.poll()), 90)
        assert a.poll() is None and b.poll() is None, logs[0].read_text() + logs[1].read_text()
        ready = time.time()

        # 1. The embedded alert fires on both replicas: one message.
        wait_for(lambda: delivered(im)[("EngineDown", "firing")] >= 1, 30)
        # 2. Alertmanager posts the same group to both replicas (as an HA pair of Alertmanagers does).
        post_alertmanager(ports[0], alertname="FromAlertmanager")
        post_alertmanager(ports[1], alertname="FromAlertmanager")
        wait_for(lambda: delivered(im)[("FromAlertmanager", "firing")] >= 1, 30)
        time.sleep(max(0.0, ready + 12 - time.time()))  # both replicas tick for at least 12 s

        # 3. The spend ledger: each interval counted once, not once per replica.
        usd, updated = fleet_spend(pg_url)
        assert usd <= RATE * (updated - started) / 3600 * (1 + 1e-9)  # twice would be ~2x this
        assert usd >= RATE * (updated - ready - 3) / 3600  # and nothing skipped

        # 4. kill -9 of one replica while a notification it took is undeliverable; the other delivers it.
        im.down("webhook")
        attempts = im.attempts("webhook")
        post_alertmanager(ports[0], alertname="QueuedByTheDeadOne")
        wait_for(lambda: im.attempts("webhook") > attempts, 30)
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        im.up("webhook")
        wait_for(lambda: delivered(im)[("QueuedByTheDeadOne", "firing")] >= 1, 60)
        post_alertmanager(ports[1], alertname="AfterTheKill")
        wait_for(lambda: delivered(im)[("AfterTheKill", "firing")] >= 1, 30)
        time.sleep(3)  # a few more sender runs: nothing goes out twice
        assert b.poll() is None, logs[1].read_text()

    assert delivered(im) == Counter({("EngineDown", "firing"): 1, ("FromAlertmanager", "firing"): 1,
                                     ("QueuedByTheDeadOne", "firing"): 1, ("AfterTheKill", "firing"): 1})
