"""The store never holds the event loop (#18 item 4): a 5,000-alert payload, a database another
process keeps locked — /healthz keeps answering, scrapes keep landing, and the `store` collector
(with its StoreFailing alert) says what is wrong. A deleted SQLite file: tests/alerting/test_store_lost.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.alerting.alertmanager_payload import am_payload
from tests.alerting.helpers import HOLD_LOCK, receiver_data, wait_for
from tests.alerting.imserver import ImServer
from tests.conftest import FIXTURES
from tests.support.latency import healthz_probe
from tests.support.pageserver import Page, PageServer
from tests.support.served_process import infermon_serve

pytestmark = pytest.mark.alone  # a /healthz latency bar (tests/support/latency.py): run with no neighbours

TOKEN = "store-test-token-91ab"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
STORE_SUCCESS = 'inference_monitor_collector_success{collector="store",target=""}'


def config(tmp_path: Path, im: ImServer, pages: PageServer, **api: Any) -> dict[str, Any]:
    return {
        "api": {"token": TOKEN, **api},
        "storage": {"url": f"sqlite:///{tmp_path / 'monitor.db'}", "check_interval": "1s"},
        "infra": {"nvml": {"enabled": False}},
        "service": {"scrape_interval": "1s", "targets": [{"name": "vllm-a", "url": pages.url("/metrics")}]},
        "alerting": {"rules_files": [],
                     "receivers": [receiver_data(im, "webhook", group_wait="1s", group_interval="1s")]},
    }


@contextmanager
def served(tmp_path: Path, im: ImServer, **api: Any) -> Iterator[tuple[str, PageServer]]:
    """`infermon serve` in its own process (its loop measured alone), scraping one fixture page."""
    pages = PageServer().start()
    pages.set("/metrics", Page((FIXTURES / "sample_vllm_v1.prom").read_text()))
    try:
        with infermon_serve(tmp_path, config(tmp_path, im, pages, **api)) as url:
            yield url, pages
    finally:
        pages.close()



def many_alerts(count: int, pad: int = 0) -> dict[str, Any]:
    payload = am_payload()
    one = payload["alerts"][0]
    payload["alerts"] = [{**one, "labels": {**one["labels"], "gpu": str(i % 8), "node": f"n{i // 8}",
                                            "pad": "p" * pad}} for i in range(count)]
    return payload


def store_success(url: str) -> float | None:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(STORE_SUCCESS):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_5000_alert_payload_does_not_hold_the_loop(tmp_path: Path) -> None:
    with ImServer() as im, served(tmp_path, im, max_alerts_per_payload=5000) as (url, _), \
            healthz_probe(url) as probe:
        body = json.dumps(many_alerts(5000))  # encoded before: the test's own work is not the monitor's
        probe.wait_for_answers(30)
        quiet = len(probe.times)
        answer = httpx.post(f"{url}/api/v1/alertmanager", content=body, headers=AUTH, timeout=120)
        assert answer.status_code == 200 and answer.json()["new_transitions"] == 5000, answer.text
        # ... and the group flushes that follow (a notification per node group, 1 s apart)
        wait_for(lambda: len(im.accepted("webhook")) >= 1, seconds=60)
        probe.wait_for_answers(len(probe.times) + 30)
        probe.check(quiet, "5,000-alert payload, stored and flushed")
        assert sum(len(body["alerts"]) for body in im.accepted("webhook")) == 5000
        again = httpx.post(f"{url}/api/v1/alertmanager", json=many_alerts(5000), headers=AUTH, timeout=120)
        assert again.json()["new_transitions"] == 0  # exactly once, as before


def test_payloads_are_cut_to_the_limits_and_say_so(tmp_path: Path) -> None:
    with ImServer() as im, served(tmp_path, im, max_alerts_per_payload=100, max_label_chars=256) as (url, _p):
        answer = httpx.post(f"{url}/api/v1/alertmanager", json=many_alerts(150, pad=20_000), headers=AUTH,
                            timeout=60)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["alerts"] == 100 and body["new_transitions"] == 100
        assert body["cut"] == {"alerts_dropped": 50, "label_values_cut": 100, "annotation_values_cut": 0,
                               "keys": ["pad"]}
        wait_for(lambda: len(im.accepted("webhook")) >= 1)
        sent = im.accepted("webhook")[0]["alerts"][0]["labels"]["pad"]
        assert len(sent) == 256 and sent.endswith("…")
    log = (tmp_path / "infermon.out").read_text()
    assert "50 alert(s) dropped past 100" in log and "100 label" in log


def test_another_process_holding_the_sqlite_lock(tmp_path: Path) -> None:
    with ImServer() as im, served(tmp_path, im) as (url, pages), healthz_probe(url) as probe:
        wait_for(lambda: store_success(url) == 1.0)
        probe.wait_for_answers(30)
        quiet, scrapes = len(probe.times), pages.hits["/metrics"]
        with subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path / "monitor.db")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as holder:
            try:
                assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
                posted = httpx.post(f"{url}/api/v1/alertmanager", json=many_alerts(10), headers=AUTH, timeout=30)
                assert posted.status_code == 503  # SQLite's busy timeout passed: Alertmanager retries
                wait_for(lambda: store_success(url) == 0.0)
                status = httpx.get(f"{url}/api/v1/status").json()
                store = next(c for c in status["collectors"] if c["collector"] == "store")
                assert "locked" in store["error"]
                probe.wait_for_answers(len(probe.times) + 30)
                probe.check(quiet, "SQLite lock held by another process")
                assert pages.hits["/metrics"] > scrapes + 3  # the target kept being scraped ...
                assert 'inference_target_up{target="vllm-a"} 1.0' in httpx.get(f"{url}/metrics").text  # ... and up
            finally:
                assert holder.stdin is not None
                holder.stdin.close()  # the holder commits and ends
                holder.wait(timeout=10)
        wait_for(lambda: httpx.post(f"{url}/api/v1/alertmanager", json=many_alerts(10), headers=AUTH,
                                    timeout=30).status_code == 200)
        wait_for(lambda: store_success(url) == 1.0)
        wait_for(lambda: len(im.accepted("webhook")) >= 1)

