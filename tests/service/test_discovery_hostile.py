"""file_sd files a generator caught mid-write or an attacker wrote: a byte that is not UTF-8, a YAML
alias bomb, nesting too deep. Each file says why and keeps its last good targets; collection goes on."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.service.discovery import DiscoveryError, FileDiscovery, parse_target_groups
from tests.service.test_discovery import wait_until
from tests.support.appserver import serve_app
from tests.support.pageserver import Page, PageServer
from tests.test_cli import FIXTURE

ALIAS_BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"]
                       + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
                       + ["z: [*i]"])


def group(address: str, name: str, model: str) -> str:
    return f"- targets: ['{address}']\n  labels: {{target: {name}, model: '{model}', __metrics_path__: /a}}\n"


def test_a_cut_multibyte_character_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    sd = tmp_path / "engines.yaml"
    whole = group("10.0.0.5:8000", "a", "通义千问").encode()
    sd.write_bytes(whole)
    discovery = FileDiscovery([str(sd)])
    assert discovery.refresh() and [t.model for t in discovery.targets()] == ["通义千问"]
    cut = whole.index("千".encode()) + 1  # mid-character, as a generator caught mid-write leaves it
    sd.write_bytes(whole[:cut])
    assert discovery.refresh() is False
    assert discovery.errors[str(sd)] == f"{sd}: not valid UTF-8 at byte {cut - 1} (keeping its last good targets)"
    assert [t.name for t in discovery.targets()] == ["a"]


def test_yaml_anchors_and_aliases_are_refused_at_once() -> None:
    assert len(ALIAS_BOMB) < 600  # 9^9 strings once expanded
    started = time.perf_counter()
    with pytest.raises(DiscoveryError) as raised:
        parse_target_groups(ALIAS_BOMB, "bomb.yml")
    assert time.perf_counter() - started < 2.0  # expanded, it would take minutes
    assert str(raised.value) == "bomb.yml: line 1: YAML anchors and aliases (&, *) are not allowed in file_sd files"
    with pytest.raises(DiscoveryError, match="anchors and aliases"):
        parse_target_groups("- &g {targets: ['h:1']}\n- *g\n", "twice.yml")


@pytest.mark.parametrize("name", ["deep.json", "deep.yml"])
def test_nesting_too_deep_is_a_reason(name: str) -> None:
    with pytest.raises(DiscoveryError, match=f"{name}: nested too deep"):
        parse_target_groups("[" * 5_000 + "]" * 5_000, name)


def test_a_bad_byte_under_a_running_monitor_keeps_collection_going(tmp_path: Path) -> None:
    """The attack end to end: before the fix the service job died ("job service stopped"), /metrics
    froze and /healthz said 200."""
    sd = tmp_path / "engines.yaml"
    with PageServer() as pages:
        pages.set("/a", Page(FIXTURE))
        address = pages.url("/a").split("/")[2]
        sd.write_text(group(address, "a", "通义千问"))
        settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
            "scrape_interval": "1s", "file_sd": [str(sd)]}})
        with serve_app(Monitor(settings)) as url, httpx.Client(base_url=url) as client:
            def metrics() -> str:
                return client.get("/metrics").text

            def derived() -> float:
                return float(client.get("/api/v1/status").json()["layers"]["service"]["last_derivation"] or 0)

            wait_until(lambda: 'inference_target_up{target="a"} 1.0' in metrics())
            whole = (group(address, "a", "通义千问") + group(address, "b", "通义千问")).encode()
            sd.write_bytes(whole[:whole.rindex("问".encode()) + 2])  # cut inside the second group's model
            sd_success = f'inference_monitor_collector_success{{collector="file_sd",target="{sd}"}}'  # not _duration
            wait_until(lambda: sd_success + " 0.0" in metrics())
            status = client.get("/api/v1/status").json()
            assert "not valid UTF-8 at byte" in status["layers"]["service"]["file_sd"]["errors"][str(sd)]
            # Collection goes on: the view keeps moving, the target is still scraped, /healthz is 200.
            before = derived()
            wait_until(lambda: derived() > before + 1)
            assert client.get("/healthz").status_code == 200
            jobs = {job["job"]: job for job in client.get("/api/v1/status").json()["jobs"]}
            assert jobs["service"]["errors"] == 0 and jobs["service_scrapes"]["errors"] == 0  # handled, not caught
            assert 'inference_monitor_job_healthy{job="service"} 1.0' in metrics()
            # The generator finishes its write: the file is read again, b joins.
            sd.write_bytes(whole)
            wait_until(lambda: 'inference_target_up{target="b"} 1.0' in metrics())
            assert sd_success + " 1.0" in metrics()
