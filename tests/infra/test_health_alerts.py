"""GPU health from dcgm-exporter pages to alerts: sick and healthy GPUs on one node, both evaluators.

A real loopback server serves two dcgm-exporter pages (an H100 node in 4.8 names, a V100 node in
DCGM 4.7's names); the monitor scrapes them, the real Prometheus scrapes the monitor and loads the
shipped GPU health rules, and the monitor evaluates the same rules itself. Both must fire exactly
the alerts of the sick GPUs, each once, with the action in its annotations.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
import yaml

from monitor.config import load_settings
from monitor.rulefiles.rules import SHIPPED_DIR
from monitor.runtime import Monitor
from tests.conftest import FIXTURES, require_binary
from tests.support.alertrules import Labels, firing, short_rules
from tests.support.appserver import serve_app
from tests.support.pageserver import Page, PageServer
from tests.support.promserver import PrometheusServer

HEALTH_RULES = {rule["alert"] for group in yaml.safe_load((SHIPPED_DIR / "infra.yml").read_text())["groups"]
                if group["name"] == "infra-health" for rule in group["rules"]}
H100, V100 = "gpu-node-07", "gpu-node-v100-01"
# What a person reading the two pages expects (their header comments say which GPU is sick how).
EXPECTED = {
    ("GPUUncorrectableMemoryError", H100, "0"),  # XID 48 (its DBE count is the same fault: one alert)
    ("GPURowRemapPending", H100, "0"),
    ("GPURowRemapFailed", H100, "1"),
    ("GPURetiredPagesLimit", V100, "0"),  # 41 + 22 retired pages
    ("GPURetiredPagesPending", V100, "1"),  # with XID 63, which the pending flag stands in for
}


def _keys(alerts: set[Labels]) -> set[tuple[str, str, str]]:
    return {(a["alertname"], a["node"], a["gpu"]) for a in map(dict, alerts) if a["alertname"] in HEALTH_RULES}


@pytest.mark.prometheus
def test_exactly_the_sick_gpus_alert_on_both_evaluators(tmp_path: Path) -> None:
    binary = require_binary("prometheus")
    rules = short_rules(tmp_path, for_="1s", only=HEALTH_RULES)
    with PageServer() as pages:
        pages.set("/h100", Page((FIXTURES / "dcgm_health.prom").read_text()))
        pages.set("/v100", Page((FIXTURES / "dcgm_v100_health.prom").read_text()))
        settings = load_settings(None, {
            "infra": {"interval": "1s", "node": "monitor-host", "nvml": {"enabled": "false"},
                      "dcgm": {"targets": [{"name": "h100", "url": pages.url("/h100")},
                                           {"name": "v100", "url": pages.url("/v100")}]}},
            "alerting": {"rules_files": [str(p) for p in rules], "evaluation_interval": "1s"},
        })
        with serve_app(Monitor(settings)) as url, \
                PrometheusServer({"monitor": [f"{url}/metrics"]}, interval="1s", binary=binary,
                                 rule_files=rules) as prom:
            deadline = time.monotonic() + 60  # the bound is two minutes
            while True:
                answer = httpx.get(f"{url}/api/v1/alerts", timeout=5).json()["active"]
                ours, theirs = _keys(firing(answer)), _keys(firing(prom.alerts()))
                if ours == theirs == EXPECTED or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
    assert ours == EXPECTED
    assert theirs == EXPECTED
    pending = next(a for a in answer if a["labels"]["alertname"] == "GPURowRemapPending")
    assert pending["labels"]["severity"] == "warning"
    assert "reset it when convenient" in pending["annotations"]["description"]
    failed = next(a for a in answer if a["labels"]["alertname"] == "GPURowRemapFailed")
    assert failed["labels"]["severity"] == "critical" and "RMA" in failed["annotations"]["description"]
