"""file_sd discovery and SIGHUP reloads, under a running monitor (real HTTP, real files, real signals)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from monitor.config import load_settings
from monitor.ports import free_port
from monitor.runtime import Monitor
from monitor.service.discovery import DiscoveryError, parse_target_groups
from tests.support.appserver import serve_app
from tests.support.pageserver import Page, PageServer
from tests.test_cli import FIXTURE, env, infermon, wait_for


def test_target_groups_json_and_yaml() -> None:
    groups = [
        {"targets": ["10.0.0.5:8000"], "labels": {"target": "vllm-a", "model": "m", "__metrics_path__": "/m"}},
        {"targets": ["10.0.0.6:8000", "10.0.0.7:8000"], "labels": {"target": "pool", "__scheme__": "https"}},
        {"targets": ["10.0.0.8:3000"]},
    ]
    for text, name in ((json.dumps(groups), "t.json"), (json.dumps(groups), "t.yaml")):  # JSON is YAML too
        targets = parse_target_groups(text, name)
        assert [(t.name, t.url, t.model) for t in targets] == [
            ("vllm-a", "http://10.0.0.5:8000/m", "m"),
            ("pool-0", "https://10.0.0.6:8000/metrics", None),
            ("pool-1", "https://10.0.0.7:8000/metrics", None),
            ("10.0.0.8:3000", "http://10.0.0.8:3000/metrics", None),
        ]
    assert parse_target_groups("", "empty.yml") == []


@pytest.mark.parametrize(
    ("text", "name", "reason"),
    [
        ("[{", "bad.json", "bad.json: not valid JSON"),
        ("targets: [a]", "bad.yml", "expected a list of target groups"),
        ("- {targets: a}", "bad.yml", "group 0: expected {targets"),
        ("- {targets: ['a b']}", "bad.yml", "group 0: target 'a b': not an http(s) URL"),
    ],
)
def test_broken_files_say_where(text: str, name: str, reason: str) -> None:
    with pytest.raises(DiscoveryError) as raised:
        parse_target_groups(text, name)
    assert reason in str(raised.value)


def wait_until(check: Callable[[], bool], seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.2)


def write(path: Path, groups: object) -> None:
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps(groups))
    staged.replace(path)  # as config management tools write: atomically


def test_add_change_and_remove_targets_under_a_running_monitor(tmp_path: Path) -> None:
    sd = tmp_path / "engines.json"
    write(sd, [])
    with PageServer() as pages:
        pages.set("/a", Page(FIXTURE))
        pages.set("/b", Page(FIXTURE))
        address = pages.url("/a").split("/")[2]
        settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
            "scrape_interval": "1s", "file_sd": [str(tmp_path / "*.json")]}})
        with serve_app(Monitor(settings)) as url, httpx.Client(base_url=url) as client:
            def metrics() -> str:
                return client.get("/metrics").text

            write(sd, [{"targets": [address], "labels": {"target": "a", "__metrics_path__": "/a"}}])
            wait_until(lambda: 'inference_target_up{target="a"} 1.0' in metrics())
            write(sd, [{"targets": [address], "labels": {"target": "a", "__metrics_path__": "/a"}},
                       {"targets": [address], "labels": {"target": "b", "__metrics_path__": "/b"}}])
            wait_until(lambda: 'inference_target_up{target="b"} 1.0' in metrics())
            # Change a's path to one that does not exist: a new target state, down with the reason.
            write(sd, [{"targets": [address], "labels": {"target": "a", "__metrics_path__": "/gone"}},
                       {"targets": [address], "labels": {"target": "b", "__metrics_path__": "/b"}}])
            wait_until(lambda: 'inference_target_up{target="a"} 0.0' in metrics())
            # A broken file keeps the last good targets and says why.
            sd.write_text("[{not json")
            # The whole series' name: `..._duration_seconds{collector="file_sd",...} 0.0` is a fast read on a
            # machine with a coarse clock (CI saw it), not a failed one.
            sd_success = 'inference_monitor_collector_success{collector="file_sd",target="' + str(sd) + '"}'
            wait_until(lambda: sd_success + " 0.0" in metrics())
            status = client.get("/api/v1/status").json()["layers"]["service"]
            assert "not valid JSON" in status["file_sd"]["errors"][str(sd)]
            assert {t["name"] for t in status["targets"]} == {"a", "b"}
            # Removing a target removes its series.
            write(sd, [{"targets": [address], "labels": {"target": "b", "__metrics_path__": "/b"}}])
            wait_until(lambda: 'target="a"' not in metrics())
            assert 'inference_target_up{target="b"} 1.0' in metrics()
            assert sd_success + " 1.0" in metrics()


def test_sighup_reloads_targets_and_keeps_running_on_a_broken_file(tmp_path: Path) -> None:
    port = free_port()
    with PageServer() as pages:
        pages.set("/metrics", Page(FIXTURE))
        config = tmp_path / "serve.yaml"
        head = "infra: {nvml: {enabled: 'false'}}\nservice:\n  scrape_interval: 1s\n  targets:\n"
        config.write_text(head + f"    - {{name: a, url: '{pages.url('/metrics')}'}}\n")
        process = subprocess.Popen(infermon("serve", "--config", str(config), "--host", "127.0.0.1",
                                            "--port", str(port)), env=env(tmp_path),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(f"{base}/healthz")
            wait_until(lambda: 'inference_target_up{target="a"} 1.0' in httpx.get(f"{base}/metrics").text)
            config.write_text(head + f"    - {{name: a, url: '{pages.url('/metrics')}'}}\n"
                              f"    - {{name: b, url: '{pages.url('/metrics')}'}}\n")
            process.send_signal(signal.SIGHUP)
            wait_until(lambda: 'inference_target_up{target="b"} 1.0' in httpx.get(f"{base}/metrics").text)
            config.write_text(head + "    - {name: c, url: 'not a url'}\n")
            process.send_signal(signal.SIGHUP)
            wait_until(lambda: "inference_monitor_config_last_reload_successful 0.0"
                       in httpx.get(f"{base}/metrics").text)
            page = httpx.get(f"{base}/metrics").text
            assert 'inference_target_up{target="b"} 1.0' in page  # the running configuration is kept
            reload = httpx.get(f"{base}/api/v1/status").json()["config"]
            assert "service.targets.0.url" in reload["last_reload_error"]
        finally:
            process.terminate()
            output, _ = process.communicate(timeout=20)
    assert "configuration reload failed" in output and "service.targets.0.url" in output
