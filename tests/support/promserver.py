"""The real Prometheus and Alertmanager, started on loopback for integration tests and benchmarks."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Self

import httpx
import yaml

from monitor.ports import free_port


class LoopbackBinary(ABC):
    """A real server binary on a free loopback port, its config and data in a temp folder of its own:
    `start()` writes `_config()` as YAML, runs the binary with `_arguments(config)` and waits for
    /-/ready (30 s; a process that exits fails at once, with its log); `stop()` ends it, removes the
    folder. `with` does both."""

    name = "server"  # the log's, the config's and the temp folder's name

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"infermon-{self.name}-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @abstractmethod
    def _config(self) -> dict[str, Any]:
        """The server's config, written as YAML before it starts."""

    @abstractmethod
    def _arguments(self, config: Path) -> list[str]:
        """The binary's command-line arguments, given the written config's path."""

    def start(self) -> Self:
        config = self.dir / f"{self.name}.yml"
        config.write_text(yaml.safe_dump(self._config()))
        with (self.dir / f"{self.name}.log").open("wb") as log:
            self.process = subprocess.Popen([self.binary, *self._arguments(config)], stdout=log,
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(httpx.HTTPError):  # not listening yet
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self
            time.sleep(0.2)
        log_tail = (self.dir / f"{self.name}.log").read_text(errors="replace")[-2000:]  # stop() removes it
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready; log: {log_tail}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PrometheusServer(LoopbackBinary):
    """`prometheus` with a generated config scraping `jobs` ({job: [host:port/path urls]})."""

    name = "prometheus"

    def __init__(self, jobs: dict[str, list[str]], interval: str = "1s", binary: str | None = None,
                 rule_files: list[Path] | None = None, evaluation_interval: str | None = None,
                 alertmanagers: list[str] | None = None, scrape_configs: list[dict[str, Any]] | None = None,
                 retention: str | None = None) -> None:
        super().__init__(binary or shutil.which("prometheus") or "prometheus")
        self.jobs = jobs
        self.interval = interval
        self.rule_files = rule_files or []  # alert rules Prometheus evaluates (GET /api/v1/alerts)
        self.evaluation_interval = evaluation_interval or interval
        self.alertmanagers = alertmanagers or []  # host:port of Alertmanagers it sends firing alerts to
        self.scrape_configs = scrape_configs or []  # whole scrape configs (relabelling), beside `jobs`
        self.retention = retention  # --storage.tsdb.retention.time (backfilled weeks need more than 15d)

    def _config(self) -> dict[str, Any]:
        scrape_configs = []
        for job, urls in self.jobs.items():
            paths = {httpx.URL(u).path for u in urls}
            scrape_configs.append({
                "job_name": job,
                "scrape_interval": self.interval,
                "scrape_timeout": self.interval,
                "metrics_path": paths.pop(),
                "static_configs": [{"targets": [f"{httpx.URL(u).host}:{httpx.URL(u).port}" for u in urls]}],
            })
        scrape_configs += self.scrape_configs
        config: dict[str, Any] = {"global": {"scrape_interval": self.interval}, "scrape_configs": scrape_configs}
        if self.rule_files:
            config["global"]["evaluation_interval"] = self.evaluation_interval
            config["rule_files"] = [str(path) for path in self.rule_files]
        if self.alertmanagers:
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": self.alertmanagers}]}]}
        return config

    def _arguments(self, config: Path) -> list[str]:
        return [f"--config.file={config}", f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *([f"--storage.tsdb.retention.time={self.retention}"] if self.retention else [])]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, str] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        response = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()["data"]["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        """Prometheus' active alerts (pending and firing), as GET /api/v1/alerts returns them."""
        response = httpx.get(f"{self.url}/api/v1/alerts", timeout=10)
        response.raise_for_status()
        alerts: list[dict[str, Any]] = response.json()["data"]["alerts"]
        return alerts

    def active_targets(self) -> list[dict[str, Any]]:
        """GET /api/v1/targets' active targets (after relabelling: a dropped one is not there)."""
        response = httpx.get(f"{self.url}/api/v1/targets", params={"state": "active"}, timeout=10)
        response.raise_for_status()
        targets: list[dict[str, Any]] = response.json()["data"]["activeTargets"]
        return targets


class AlertmanagerServer(LoopbackBinary):
    """`alertmanager` (Debian `prometheus-alertmanager`) with one webhook receiver at `webhook_url`;
    `route` overrides the route's timing (group_wait, group_interval, repeat_interval). Without
    overrides: Alertmanager's own."""

    name = "alertmanager"

    def __init__(self, webhook_url: str, route: dict[str, str] | None = None, binary: str | None = None) -> None:
        super().__init__(binary or shutil.which("prometheus-alertmanager") or "alertmanager")
        self.webhook_url = webhook_url
        self.route = route or {}

    def _config(self) -> dict[str, Any]:
        route: dict[str, Any] = {"receiver": "bench", "group_by": ["alertname"], **self.route}
        return {"route": route, "receivers": [{"name": "bench", "webhook_configs": [{"url": self.webhook_url}]}]}

    def _arguments(self, config: Path) -> list[str]:
        return [f"--config.file={config}", f"--storage.path={self.dir / 'data'}", "--cluster.listen-address=",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
