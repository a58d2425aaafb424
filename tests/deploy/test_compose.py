"""docker-compose.yml, deploy/Dockerfile and the configs they mount, checked without a Docker daemon:
Debian's `docker-compose` (a real Compose implementation) parses and interpolates the file;
promtool and amtool check the Prometheus and Alertmanager configurations as the containers see them."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from monitor.app import create_app
from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.alerting.alertmanager_payload import am_payload
from tests.alerting.helpers import receiver_data
from tests.alerting.imserver import ImServer
from tests.conftest import require_binary
from tests.support.appserver import serve_app

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {ROOT / "deploy/secrets/infermon-api-token"}  # created by the operator, git-ignored
MONITOR_HOST = "inference-monitor:9480"


def _compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    binary = require_binary("docker-compose")
    return subprocess.run([binary, "--project-directory", str(ROOT), "-f", str(ROOT / "docker-compose.yml"), *args],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **(env or {})})


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    result = _compose("--profile", "gpu", "--profile", "vllm", "config", env={"GRAFANA_ADMIN_PASSWORD": "from-env"})
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


def test_services_and_profiles(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"monitor", "prometheus", "alertmanager", "grafana", "dcgm-exporter", "vllm"}
    assert services["dcgm-exporter"]["profiles"] == ["gpu"] and services["vllm"]["profiles"] == ["vllm"]
    # a service with profiles starts only with its profile (Compose); the four others always
    always = [name for name, service in services.items() if "profiles" not in service]
    assert always == ["alertmanager", "grafana", "monitor", "prometheus"]
    assert services["monitor"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert "inference-monitor" in services["monitor"]["networks"]["default"]["aliases"]


def test_every_image_is_pinned(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        image = service["image"]
        tag = image.rsplit(":", 1)[1] if ":" in image.split("/")[-1] else ""
        assert tag and tag != "latest" and re.search(r"\d", tag), (name, image)


def test_every_mounted_file_exists(compose: dict[str, Any]) -> None:
    mounted = []
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("/"):
                mounted.append((name, Path(source)))
    assert len(mounted) >= 10
    missing = [(name, path) for name, path in mounted if not path.exists() and path not in SECRETS]
    assert not missing, missing
    assert {Path(s["file"]) for s in compose["secrets"].values()} == SECRETS


def test_secrets_come_from_the_environment(compose: dict[str, Any]) -> None:
    assert compose["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "from-env"
    text = (ROOT / "docker-compose.yml").read_text()
    assert not re.search(r"(?i)(password|token|api_key)\s*[:=]\s*[\"']?[A-Za-z0-9]{8,}", text)
    assert "deploy/secrets/*" not in text and (ROOT / "deploy/secrets/.gitignore").read_text().splitlines()[1] == "*"


def test_a_fresh_clone_passes_config_with_the_trial_defaults() -> None:
    # No .env, no secret file: `docker-compose config -q` passes, Grafana's password is the trial one.
    fresh = _compose("config")
    assert fresh.returncode == 0, fresh.stderr
    assert yaml.safe_load(fresh.stdout)["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "admin"
    example = dict(line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines()
                   if line and not line.startswith("#"))
    assert example["GRAFANA_ADMIN_PASSWORD"] == "admin"
    assert _compose("config", "-q", env=example).returncode == 0


def test_the_gpu_overlay_reserves_the_gpus_for_the_monitor() -> None:
    result = _compose("-f", str(ROOT / "docker-compose.gpu.yml"), "config")
    assert result.returncode == 0, result.stderr
    monitor = yaml.safe_load(result.stdout)["services"]["monitor"]
    devices = monitor["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}] or \
        devices == [{"driver": "nvidia", "count": -1, "capabilities": ["gpu"]}]
    assert "deploy" not in yaml.safe_load(_compose("config").stdout)["services"]["monitor"]


def test_prometheus_gets_the_rules_and_grafana_the_dashboards(compose: dict[str, Any]) -> None:
    prometheus = compose["services"]["prometheus"]["volumes"]
    assert f"{ROOT}/alerts:/etc/prometheus/alerts:ro" in prometheus
    assert f"{ROOT}/deploy/prometheus/recording.yml:/etc/prometheus/recording.yml:ro" in prometheus
    grafana = compose["services"]["grafana"]["volumes"]
    assert f"{ROOT}/dashboards:/var/lib/grafana/dashboards:ro" in grafana
    provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/inference-monitor.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    source = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text())
    assert source["datasources"][0]["type"] == "prometheus"
    assert source["datasources"][0]["url"] == "http://prometheus:9090"


def _container_paths(tmp: Path) -> Path:
    """prometheus.yml with /etc/prometheus/ pointing at a copy of what compose mounts there."""
    for relative, target in (("deploy/prometheus/recording.yml", "recording.yml"), ("alerts", "alerts"),
                             ("deploy/prometheus/targets", "targets")):
        source = ROOT / relative
        (shutil.copytree if source.is_dir() else shutil.copy)(source, tmp / target)
    config = tmp / "prometheus.yml"
    config.write_text((ROOT / "deploy/prometheus/prometheus.yml").read_text().replace("/etc/prometheus/", f"{tmp}/"))
    return config


def test_promtool_checks_the_shipped_prometheus_config(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    result = subprocess.run([promtool, "check", "config", str(_container_paths(tmp_path))],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr
    assert "rules found" in result.stdout  # recording.yml and alerts/*.yml were loaded and checked


def test_prometheus_and_alertmanager_reach_the_monitor_by_one_name() -> None:
    prometheus = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    monitor_job = next(job for job in prometheus["scrape_configs"] if job["job_name"] == "inference-monitor")
    assert monitor_job["static_configs"][0]["targets"] == [MONITOR_HOST]
    alertmanager = yaml.safe_load((ROOT / "deploy/alertmanager/alertmanager.yml").read_text())
    assert alertmanager["receivers"][0]["webhook_configs"][0]["url"] == f"http://{MONITOR_HOST}/api/v1/alertmanager"


def test_the_monitor_config_loads() -> None:
    settings = load_settings(ROOT / "deploy/monitor/infermon.yml")
    assert settings.service.file_sd == ["/etc/prometheus/targets/*.yml"]


def test_the_shipped_compose_config_delivers_each_alert_once() -> None:
    # Prometheus evaluates alerts/ and sends to Alertmanager; the monitor's own evaluator is off,
    # so the only way in is Alertmanager's webhook: one alert, one message per receiver.
    prometheus = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    assert "/etc/prometheus/alerts/*.yml" in prometheus["rule_files"]
    assert prometheus["alerting"]["alertmanagers"]
    with ImServer() as im:
        settings = load_settings(ROOT / "deploy/monitor/infermon.yml", {
            "service": {"file_sd": []}, "storage": {"url": "sqlite://"}, "api": {"token": "t0ken-for-the-test"},
            "alerting": {"receivers": [receiver_data(im, "webhook")]}})
        monitor = Monitor(settings)
        assert monitor.alerting is None  # one evaluator per deployment: Prometheus's
        with serve_app(monitor) as url, httpx.Client(base_url=url, timeout=10) as client:
            auth = {"Authorization": "Bearer t0ken-for-the-test"}
            assert client.post("/api/v1/alertmanager", json=am_payload(), headers=auth).status_code == 200
            deadline = time.monotonic() + 20
            while not im.accepted("webhook"):
                assert time.monotonic() < deadline, "the receiver got nothing"
                time.sleep(0.05)
            for _ in range(3):  # the embedded sender runs every second: nothing else arrives
                client.post("/api/v1/alertmanager", json=am_payload(), headers=auth)
            deadline = time.monotonic() + 2.5
            while time.monotonic() < deadline:
                assert len(im.accepted("webhook")) == 1
                time.sleep(0.1)


def test_dockerfile_installs_this_package_as_non_root_with_a_real_healthcheck() -> None:
    text = (ROOT / "deploy/Dockerfile").read_text()
    assert "COPY pyproject.toml" in text and "'.[postgres]'" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f"'{project['name']}[postgres]'" in text and "postgres" in project["optional-dependencies"]
    user = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert user and user[-1] not in ("0", "root")
    assert all(re.search(r":[\w.-]*\d", line) for line in re.findall(r"^FROM\s+(\S+)", text, re.M))
    health = re.search(r"HEALTHCHECK .*?(http://127\.0\.0\.1:(\d+)(/\w+))", text, re.S)
    assert health and health.group(2) == "9480"
    routes = {getattr(route, "path", "") for route in create_app(Monitor(load_settings(None))).routes}
    assert health.group(3) in routes
