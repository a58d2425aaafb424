"""The real Alertmanager (Debian `prometheus-alertmanager`) posts to the monitor's receiver, which
fans out to the loopback stand-ins for Feishu, DingTalk, WeCom, Slack and a webhook; each checks
its signature with the documented algorithm. Our fingerprints equal Alertmanager's."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from monitor.alerting.model import fingerprint
from monitor.ports import free_port
from tests.alerting.imserver import KINDS, ImServer
from tests.alerting.test_am_receiver import API_TOKEN, monitor_app, wait_for
from tests.conftest import require_binary

DEPLOY = Path(__file__).parents[2] / "deploy" / "alertmanager" / "alertmanager.yml"


@contextmanager
def alertmanager(tmp: Path, monitor_url: str) -> Iterator[str]:
    binary = require_binary("prometheus-alertmanager")
    (tmp / "token").write_text(API_TOKEN)
    config = tmp / "alertmanager.yml"
    config.write_text(f"""
route:
  receiver: infermon
  group_by: [alertname]
  group_wait: 2s  # the POST's two alerts in one notification (their startsAt is now: see the test)
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: infermon
    webhook_configs:
      - url: {monitor_url}/api/v1/alertmanager
        http_config:
          authorization:
            credentials_file: {tmp / "token"}
""")
    port = free_port()
    log = (tmp / "alertmanager.log").open("w")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.path={tmp / 'data'}", "--cluster.listen-address=",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(url) or proc.poll() is not None, 30)
        assert proc.poll() is None, (tmp / "alertmanager.log").read_text()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _alerts(start: datetime, ends: datetime | None = None) -> list[dict[str, Any]]:
    out = []
    for gpu in ("0", "1"):
        alert: dict[str, Any] = {
            "labels": {"alertname": "GPUTemperatureHigh", "severity": "warning", "node": "gpu-node-01", "gpu": gpu},
            "annotations": {"summary": f"GPU {gpu} on gpu-node-01 is at 86 °C", "description": "above 80 °C"},
            "startsAt": start.isoformat(),
            "generatorURL": "http://prometheus:9090/graph",
        }
        if ends is not None:
            alert["endsAt"] = ends.isoformat()
        out.append(alert)
    return out


def test_real_alertmanager_to_every_platform(tmp_path: Path) -> None:
    with ImServer() as im, monitor_app(im) as (_, client):
        im.fail_next("feishu", 1)  # Feishu says "frequency limited" once: retried, delivered once
        im.fail_next("dingtalk", 1)
        with alertmanager(tmp_path, str(client.base_url).rstrip("/")) as am:
            # Started now: Alertmanager flushes a new group at once when an alert's startsAt is more
            # than group_wait ago, and the POST's second alert can then miss the first notification
            # (seen beside two CPU hogs, with startsAt days back).
            start = datetime.now(UTC)
            assert httpx.post(f"{am}/api/v2/alerts", json=_alerts(start), timeout=5).status_code == 200
            wait_for(lambda: all(im.accepted(k) for k in KINDS), 30)
            ours = {a["fingerprint"] for a in im.accepted("webhook")[0]["alerts"]}
            theirs = {a["fingerprint"] for a in httpx.get(f"{am}/api/v2/alerts", timeout=5).json()}
            assert ours == theirs and len(ours) == 2
            assert ours == {fingerprint(a["labels"]) for a in _alerts(start)}
            resolved = httpx.post(f"{am}/api/v2/alerts", json=_alerts(start, datetime.now(UTC)), timeout=5)
            assert resolved.status_code == 200
            wait_for(lambda: any(b["status"] == "resolved" for b in im.accepted("webhook")), 30)
            time.sleep(1.5)  # Alertmanager's next group_interval: nothing more must arrive
    delivered = [(a["fingerprint"], a["status"]) for b in im.accepted("webhook") for a in b["alerts"]]
    assert sorted(delivered) == sorted({(f, s) for f in ours for s in ("firing", "resolved")})
    for kind in ("feishu", "dingtalk"):
        firing = [b for b in im.accepted(kind) if "FIRING" in str(b)]
        assert len(firing) == 1 and im.attempts(kind) >= 2, kind


def test_shipped_config_passes_amtool() -> None:
    amtool = require_binary("amtool")
    result = subprocess.run([amtool, "check-config", str(DEPLOY)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "/api/v1/alertmanager" in DEPLOY.read_text() and "credentials_file" in DEPLOY.read_text()
