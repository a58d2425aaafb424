"""`kill -9` of a real `infermon serve` with notifications it could not deliver yet: after a
restart on the same SQLite file they are delivered, once each; nothing secret reaches its output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from monitor.ports import free_port
from tests.alerting.alertmanager_payload import am_payload
from tests.alerting.imserver import BEARER, SECRETS, TOKENS, ImServer
from tests.alerting.test_am_receiver import API_TOKEN, wait_for

INFERMON = Path(sys.executable).parent / "infermon"


def write_config(tmp: Path, im: ImServer, port: int) -> Path:
    (tmp / "hook-url").write_text(im.url("webhook") + "\n")
    (tmp / "ding-secret").write_text(SECRETS["dingtalk"])
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "debug"},
        "storage": {"url": f"sqlite:///{tmp / 'infermon.db'}"},
        "infra": {"nvml": {"enabled": "false"}},
        "alerting": {
            "rules_files": [],
            "receivers": [
                {"name": "ops", "type": "webhook", "url_file": str(tmp / "hook-url"), "token": BEARER},
                {"name": "ding", "type": "dingtalk", "url": im.url("dingtalk"),
                 "secret_file": str(tmp / "ding-secret")},
            ],
        },
    }
    path = tmp / "infermon.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def serve(config: Path, port: int, output: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERMON_")}
    env["INFERMON_API__TOKEN"] = API_TOKEN
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


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.long
def test_kill_9_then_restart_delivers_once(tmp_path: Path) -> None:
    port = free_port()
    output = tmp_path / "infermon.out"
    with ImServer() as im:
        config = write_config(tmp_path, im, port)
        im.down("webhook")
        im.down("dingtalk")
        with serve(config, port, output) as proc:
            auth = {"Authorization": f"Bearer {API_TOKEN}"}
            posted = httpx.post(f"http://127.0.0.1:{port}/api/v1/alertmanager", json=am_payload(), headers=auth)
            assert posted.status_code == 200
            wait_for(lambda: im.attempts("webhook") >= 1 and im.attempts("dingtalk") >= 1, 30)
            wait_for(lambda: "send failed" in output.read_text(), 10)  # the failure is logged before the kill
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        assert im.accepted("webhook") == [] and im.accepted("dingtalk") == []
        im.up("webhook")
        im.up("dingtalk")
        with serve(config, port, output):
            wait_for(lambda: len(im.accepted("webhook")) == 1 and len(im.accepted("dingtalk")) == 1, 30)
            # /metrics is the page rendered at the last publish tick (every few seconds): wait for it.
            sent = 'inference_monitor_notifications_total{outcome="sent",receiver="ops"} 1.0'
            wait_for(lambda: sent in _metrics(port)
                     and 'inference_monitor_outbox_pending{receiver="ops"} 0.0' in _metrics(port), 20)
            time.sleep(1.5)  # another sender run: nothing is sent twice
            metrics = _metrics(port)
        assert len(im.accepted("webhook")) == 1 and len(im.accepted("dingtalk")) == 1
    assert 'inference_monitor_notifications_total{outcome="sent",receiver="ops"} 1.0' in metrics
    assert 'inference_monitor_notifications_failing{receiver="ding"} 0.0' in metrics
    logs = output.read_text()
    assert "send failed" in logs
    for secret in (*TOKENS.values(), *SECRETS.values(), BEARER, API_TOKEN):
        assert secret not in logs


def _metrics(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics").text
