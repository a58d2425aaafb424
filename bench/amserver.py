"""The real Alertmanager (Debian `prometheus-alertmanager`), started on loopback for benchmarks."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from monitor.ports import free_port


class AlertmanagerServer:
    """`alertmanager` with one webhook receiver at `webhook_url`; `route` overrides the route's
    timing (group_wait, group_interval, repeat_interval). Without overrides: Alertmanager's own."""

    def __init__(self, webhook_url: str, route: dict[str, str] | None = None, binary: str | None = None) -> None:
        self.binary = binary or shutil.which("prometheus-alertmanager") or "alertmanager"
        self.webhook_url = webhook_url
        self.route = route or {}
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="infermon-am-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _config(self) -> dict[str, Any]:
        route: dict[str, Any] = {"receiver": "bench", "group_by": ["alertname"], **self.route}
        return {"route": route, "receivers": [{"name": "bench", "webhook_configs": [{"url": self.webhook_url}]}]}

    def start(self) -> AlertmanagerServer:
        config = self.dir / "alertmanager.yml"
        config.write_text(yaml.safe_dump(self._config()))
        with (self.dir / "alertmanager.log").open("wb") as log:
            self.process = subprocess.Popen(
                [self.binary, f"--config.file={config}", f"--storage.path={self.dir / 'data'}",
                 "--cluster.listen-address=", f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        log_text = (self.dir / "alertmanager.log").read_text()[-2000:]
        self.stop()
        raise RuntimeError(f"alertmanager did not become ready; log: {log_text}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> AlertmanagerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
