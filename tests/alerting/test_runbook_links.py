"""alerting.runbook_base_url: the shipped runbooks live in docs/runbooks/, and with a base URL their
paths reach every receiver (and the page) as links; runbooks that are URLs or prose stay as written."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import yaml

from monitor.alerting.runbooks import RUNBOOK_DIR, runbook_link
from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.alerting.alertmanager_payload import am_payload
from tests.alerting.helpers import receiver_data
from tests.alerting.imserver import KINDS, ImServer
from tests.support.appserver import serve_app

ROOT = Path(__file__).resolve().parents[2]
BASE = "https://github.com/acme/inference-monitor/blob/main/"
RUNBOOK = "docs/runbooks/quality.md#qualityscorelow"


def test_every_shipped_runbook_path_is_in_docs_runbooks_and_its_anchor_exists() -> None:
    paths = [rule["annotations"]["runbook"] for path in sorted((ROOT / "alerts").glob("*.yml"))
             for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]
             if rule["annotations"]["runbook"].split("#")[0].endswith(".md")]
    assert len(paths) >= 10 and all(p.startswith(RUNBOOK_DIR) for p in paths), paths
    for path in paths:
        file, _, anchor = path.partition("#")
        text = (ROOT / file).read_text().lower()
        assert f'id="{anchor}"' in text or f"## {anchor}" in text.replace("-", ""), path
    assert not (ROOT / "alerts" / "runbooks").exists()


def test_links_only_for_repository_paths() -> None:
    assert runbook_link(RUNBOOK, BASE) == BASE + RUNBOOK
    assert runbook_link(RUNBOOK, BASE.rstrip("/")) == BASE + RUNBOOK
    assert runbook_link(RUNBOOK, None) == RUNBOOK
    assert runbook_link("https://wiki.example/gpu", BASE) == "https://wiki.example/gpu"
    assert runbook_link("Run nvidia-smi on node-1", BASE) == "Run nvidia-smi on node-1"


def test_every_receiver_gets_the_runbook_as_a_link() -> None:
    payload = am_payload()
    payload["alerts"][0]["annotations"]["runbook"] = RUNBOOK
    with ImServer() as im:
        settings = load_settings(None, {"api": {"token": "t0ken-for-the-test"}, "alerting": {
            "runbook_base_url": BASE, "receivers": [receiver_data(im, kind) for kind in KINDS]}})
        with serve_app(Monitor(settings)) as url, httpx.Client(base_url=url, timeout=10) as client:
            answer = client.post("/api/v1/alertmanager", json=payload,
                                 headers={"Authorization": "Bearer t0ken-for-the-test"})
            assert answer.status_code == 200
            deadline = time.monotonic() + 20
            while not all(im.accepted(kind) for kind in KINDS):
                assert time.monotonic() < deadline, {kind: len(im.accepted(kind)) for kind in KINDS}
                time.sleep(0.05)
        bodies = {kind: json.dumps(im.accepted(kind)[0], ensure_ascii=False) for kind in KINDS}
    assert im.accepted("webhook")[0]["alerts"][0]["annotations"]["runbook"] == BASE + RUNBOOK
    assert all(BASE + RUNBOOK in body for body in bodies.values()), bodies
