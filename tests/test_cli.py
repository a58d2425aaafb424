"""The CLI as a user runs it: real processes, real ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from monitor.ports import free_port
from tests.service.exporters import prefixed
from tests.support.pageserver import Page, PageServer
from tests.support.served_process import stop

FIXTURE = (Path(__file__).parent / "fixtures" / "sample_vllm_v1.prom").read_text()


def infermon(*args: str) -> list[str]:
    return [sys.executable, "-m", "monitor.cli", *args]


def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "INFERMON_STORAGE__URL": f"sqlite:///{tmp_path / 'infermon.db'}", "PYTHONUNBUFFERED": "1"}


def wait_for(url: str, seconds: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return httpx.get(url, timeout=2)
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_check_names_the_bad_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("service:\n  scrape_interval: soon\n")
    result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                            env=env(tmp_path), timeout=60, check=False)
    assert result.returncode == 2
    assert "service.scrape_interval" in result.stderr


def test_check_scrapes_each_target_once(tmp_path: Path) -> None:
    with PageServer() as server:
        server.set("/metrics", Page(FIXTURE))
        server.set("/kserve", Page(prefixed(FIXTURE, "kserve_")))
        config = tmp_path / "ok.yaml"
        config.write_text(
            "infra: {nvml: {enabled: 'false'}}\n"
            f"service:\n  targets:\n    - {{name: a, url: '{server.url('/metrics')}'}}\n"
            f"    - {{name: b, url: '{server.url('/missing')}'}}\n"
            f"    - {{name: c, url: '{server.url('/kserve')}'}}\n"
        )
        result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                                env=env(tmp_path), timeout=60, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "up, vllm v1" in result.stdout
    assert "DOWN: HTTP 404" in result.stdout
    assert "set metric_prefix: kserve_ on this target" in result.stdout  # KServe's queue-proxy names


def test_check_fails_on_a_dead_dcgm_exporter_writes_no_database_and_prints_no_log_lines(tmp_path: Path) -> None:
    with PageServer() as server:
        server.set("/metrics", Page(FIXTURE))
        config = tmp_path / "dcgm.yaml"
        config.write_text(
            "infra: {nvml: {enabled: 'false'}, dcgm: {targets: [{name: node-1, url: 'http://127.0.0.1:9/metrics'}]}}\n"
            "cost: {static_gpus: [{model: Tesla T4, count: 1, node: desk}, {model: NVIDIA H100, count: 1, node: r}]}\n"
            f"service:\n  targets:\n    - {{name: a, url: '{server.url('/metrics')}'}}\n"
        )
        environ = {k: v for k, v in os.environ.items() if not k.startswith("INFERMON_")}
        result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                                env=environ, timeout=60, check=False, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "dcgm node-1" in result.stdout and "DOWN" in result.stdout
    assert "without a price" in result.stdout
    assert "not mapped to GPUs: a" in result.stdout
    assert "note: GPU desk/0 ('Tesla T4') has no price" in result.stdout  # the warning, as part of the report
    assert " WARNING " not in result.stdout + result.stderr and "monitor.cost:" not in result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == [config]  # no ./infermon.db


def test_check_blames_the_environment_variable_and_suggests_a_key(tmp_path: Path) -> None:
    config = tmp_path / "min.yaml"
    config.write_text("service:\n  windows: [1m]\n")
    bad_env = {**env(tmp_path), "INFERMON_SERVICE__SCRAPE_INTERVAL": "soon"}
    result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                            env=bad_env, timeout=60, check=False)
    assert result.returncode == 2
    assert "INFERMON_SERVICE__SCRAPE_INTERVAL (environment): service.scrape_interval: not a duration" in result.stderr
    assert "min.yaml" not in result.stderr
    undecodable = {**env(tmp_path), "INFERMON_SERVICE__WINDOWS": "x"}  # a list not in JSON (#48 item 8)
    result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                            env=undecodable, timeout=60, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "SettingsError" not in result.stderr
    assert "INFERMON_SERVICE__WINDOWS (environment): service: a value cannot be read" in result.stderr
    config.write_text("service:\n  scrape_intervall: 5s\n")
    result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                            env=env(tmp_path), timeout=60, check=False)
    assert "service.scrape_intervall: unknown key (did you mean 'scrape_interval'?)" in result.stderr
    config.write_text("service:\n  scrape_interval: 5s\n  scrape_timeout: 30s\n")
    result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                            env=env(tmp_path), timeout=60, check=False)
    assert result.returncode == 2 and "scrape_timeout 30s is longer than scrape_interval 5s" in result.stderr
    config.write_text("service:\n  windows: [1m\n")
    result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                            env=env(tmp_path), timeout=60, check=False)
    assert result.returncode == 2 and f"{config}: not valid YAML: line 3, column 1" in result.stderr
    assert "<unicode string>" not in result.stderr


def test_check_reads_a_postgresql_store_once_and_migrates_nothing(tmp_path: Path, pg_url: str) -> None:
    # #48 item 8: `check` said "configuration OK" and then died in a traceback on a store it could not load.
    from sqlalchemy import create_engine

    from monitor.store.migrate import current

    config = tmp_path / "pg.yaml"
    config.write_text("infra: {nvml: {enabled: 'false'}}\n")
    closed = f"postgresql+psycopg://infermon:hunter2-secret@127.0.0.1:{free_port()}/infermon"
    for url, code, line in [(closed, 1, "DOWN: postgresql+psycopg://infermon:***@127.0.0.1:"),
                            (pg_url, 0, "up, schema at empty; start-up migrates it to"),
                            ("postgres://infermon:hunter2-secret@db/infermon", 2,
                             "storage.url: the store is SQLite or PostgreSQL, not 'postgres'")]:
        result = subprocess.run(infermon("check", "--config", str(config)), capture_output=True, text=True,
                                env={**env(tmp_path), "INFERMON_STORAGE__URL": url}, timeout=60, check=False)
        output = result.stdout + result.stderr
        assert result.returncode == code, output
        assert line in output and "Traceback" not in output and "hunter2" not in output
    engine = create_engine(pg_url)
    try:
        assert current(engine) is None  # a check reads the store; it is `serve` or `db upgrade` that migrate
    finally:
        engine.dispose()


def test_serve_answers_then_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    with PageServer() as server:
        server.set("/metrics", Page(FIXTURE))
        config = tmp_path / "serve.yaml"
        config.write_text(
            "infra: {nvml: {enabled: 'false'}}\n"
            f"service:\n  scrape_interval: 1s\n  targets: [{{name: a, url: '{server.url('/metrics')}'}}]\n"
        )
        process = subprocess.Popen(infermon("serve", "--config", str(config), "--host", "127.0.0.1",
                                            "--port", str(port)), env=env(tmp_path),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            assert wait_for(f"http://127.0.0.1:{port}/healthz").json() == {"status": "ok"}
            deadline = time.monotonic() + 10
            while 'inference_target_up{target="a"} 1.0' not in httpx.get(f"http://127.0.0.1:{port}/metrics").text:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            process.send_signal(signal.SIGTERM)
            output, _ = process.communicate(timeout=15)
        finally:
            if process.poll() is None:
                process.kill()
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status tells why.
    assert process.returncode in (0, -signal.SIGTERM), output
    assert "monitor stopped" in output
    assert "Traceback" not in output


@pytest.mark.long
def test_demo_shows_service_numbers(tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(infermon("demo", "--port", str(port), "--duration", "40"), env=env(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        # The demo writes its three weeks of history before it serves: ~5 s alone, over 20 beside two hogs.
        wait_for(f"http://127.0.0.1:{port}/healthz", seconds=90)
        wanted = ['inference_ttft_seconds{model="meta-llama/Llama-3.1-8B-Instruct",quantile="0.99",target="vllm-sim"',
                  "inference_requests_per_second{", "inference_kv_cache_usage_ratio{",
                  'inference_canary_up{model="meta-llama/Llama-3.1-8B-Instruct",probe="demo-chat"} 1.0',
                  'inference_canary_ttft_gap_seconds{model="meta-llama/Llama-3.1-8B-Instruct",probe="demo-chat"',
                  'inference_cost_usd_per_million_tokens{model="meta-llama/Llama-3.1-8B-Instruct",tokens="generated"',
                  'inference_cost_usd_per_million_tokens{tokens="generated",window="1m"}',  # fleet-wide
                  'inference_cost_price_known{gpu="0",node="workstation"} 1.0', "inference_cost_idle_usd_per_hour ",
                  "inference_cost_budget_used_ratio "]
        deadline = time.monotonic() + 30
        while True:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            if all(w in text for w in wanted):
                break
            assert time.monotonic() < deadline, text[-3000:]
            time.sleep(1)
    finally:
        stop(process)


def test_version_and_plain_help(tmp_path: Path) -> None:
    version = subprocess.run(infermon("--version"), capture_output=True, text=True, timeout=60, check=False)
    assert version.returncode == 0 and version.stdout.startswith("infermon 0.")
    for command in ((), ("serve",), ("demo",), ("check",), ("quality", "run")):
        shown = subprocess.run(infermon(*command, "--help"), capture_output=True, text=True, timeout=60, check=False)
        assert shown.returncode == 0 and "Usage:" in shown.stdout
        assert "<bool>" not in shown.stdout, command


def test_make_demo_installs_the_package_without_the_dev_tools(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    plan = subprocess.run(["make", "-n", "-C", str(root), "demo", f"VENV={tmp_path / 'venv'}"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert installs == [f"{tmp_path / 'venv'}/bin/python -m pip install -q -e ."]
    assert "[dev]" not in plan
