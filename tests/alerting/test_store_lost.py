"""The store lost under a running monitor (#48 item 2): a deleted SQLite file answered writes 503
forever while /healthz said 200, and the StoreFailing alert was never delivered (its outbox was
the deleted database). Now the file is created again at the next store check, and the monitor's
own alerts reach the receivers from memory while the store cannot take them, recorded as sent once
it can."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, text

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.store.migrate import upgrade
from tests.alerting.alertmanager_payload import am_payload
from tests.alerting.helpers import receiver_data, wait_for
from tests.alerting.imserver import ImServer
from tests.support.appserver import serve_app
from tests.support.served_process import infermon_serve

TOKEN = "store-lost-token-3c1d"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def sample(page: str, name: str, **labels: str) -> float | None:
    wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
    for line in page.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_deleted_sqlite_file_is_created_again_and_takes_writes(tmp_path: Path) -> None:
    database = tmp_path / "monitor.db"
    config = {
        "api": {"token": TOKEN},
        "storage": {"url": f"sqlite:///{database}", "check_interval": "1s"},
        "infra": {"nvml": {"enabled": False}},
        "alerting": {"rules_files": []},
    }
    with infermon_serve(tmp_path, config) as url:
        metrics = lambda: httpx.get(f"{url}/metrics", timeout=10).text  # noqa: E731
        wait_for(lambda: sample(metrics(), "inference_monitor_collector_success", collector="store",
                                target="") == 1.0)
        first = httpx.post(f"{url}/api/v1/alertmanager", json=am_payload(), headers=AUTH, timeout=30)
        assert first.status_code == 200
        database.unlink()
        wait_for(lambda: sample(metrics(), "inference_monitor_store_recreations_total") == 1.0)
        assert database.exists()
        # Writes land in the new file: the same payload is new there (the old file's history is gone).
        answer = httpx.post(f"{url}/api/v1/alertmanager", json=am_payload(), headers=AUTH, timeout=30)
        assert answer.status_code == 200 and answer.json()["new_transitions"] == len(am_payload()["alerts"])
        assert sample(metrics(), "inference_monitor_collector_success", collector="store", target="") == 1.0
        assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
        tables = subprocess.run(["python3", "-c", "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("
                                 "'select count(*) from alert_transitions').fetchone()[0])", str(database)],
                                capture_output=True, text=True, check=True, timeout=30).stdout.strip()
        assert tables == str(len(am_payload()["alerts"]))  # written to the new file, not into the unlinked one
    log = (tmp_path / "infermon.out").read_text()
    assert f"the database file {database} was deleted; created a new one" in log


def test_a_deleted_file_whose_directory_is_gone_keeps_failing_and_says_why(tmp_path: Path) -> None:
    from monitor.health import HealthBook
    from monitor.store.session import Store
    from monitor.store.worker import StoreWorker

    folder = tmp_path / "data"
    store = Store(f"sqlite:///{folder / 'monitor.db'}")
    health = HealthBook()
    worker = StoreWorker(store.engine, health)
    try:
        (folder / "monitor.db").unlink()
        folder.rmdir()
        import asyncio

        asyncio.run(worker.probe())
        entry = health.get("store")
        assert entry.success is False and worker.recreated == 0
        assert entry.error is not None
        assert entry.error.startswith("the database file monitor.db is gone; it cannot be created again: ")
        folder.mkdir()
        asyncio.run(worker.probe())
        assert health.get("store").success is True and worker.recreated == 1
    finally:
        worker.close()
        store.engine.dispose()


STORE_RULE = {"groups": [{"name": "store", "rules": [{
    "alert": "StoreFailing", "expr": 'inference_monitor_collector_success{collector="store"} == 0', "for": "1s",
    "labels": {"severity": "critical", "layer": "monitor"},
    "annotations": {"summary": "The monitor's database is failing"}}]}]}


def names(im: ImServer) -> list[tuple[str, str]]:
    return [(a["labels"]["alertname"], a["status"]) for body in im.accepted("webhook") for a in body["alerts"]]


def test_the_store_failing_alert_is_sent_from_memory_and_recorded_once_the_store_is_back(
        tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = tmp_path / "store.yml"
    rules.write_text(yaml.safe_dump(STORE_RULE))
    monkeypatch.setenv("INFERMON_STORAGE__URL", pg_url)
    server, name = pg_url.rsplit("/", 1)
    with ImServer() as im:
        settings: dict[str, Any] = {
            "infra": {"nvml": {"enabled": False}},
            "storage": {"check_interval": "1s"},
            "alerting": {"rules_files": [str(rules)], "evaluation_interval": "1s",
                         "receivers": [receiver_data(im, "webhook", group_wait="1s", group_interval="1s")]},
        }
        monitor = Monitor(load_settings(None, settings))
        admin = create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
        try:
            with serve_app(monitor) as base:
                with admin.connect() as conn:  # the database goes away, its connections with it
                    conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
                wait_for(lambda: ("StoreFailing", "firing") in names(im), 60)
                wait_for(lambda: sample(httpx.get(f"{base}/metrics", timeout=10).text,
                                        "inference_monitor_notifications_total", receiver="webhook-rx",
                                        outcome="sent_direct") == 1.0)  # the next render has it
                with admin.connect() as conn:  # the operator restores it
                    conn.execute(text(f'CREATE DATABASE "{name}"'))
                restored = create_engine(pg_url)
                upgrade(restored)
                restored.dispose()
                wait_for(lambda: ("StoreFailing", "resolved") in names(im), 60)
                # Once each: the firing sent from memory was recorded as sent, not sent again by the outbox.
                assert names(im) == [("StoreFailing", "firing"), ("StoreFailing", "resolved")]
                history = httpx.get(f"{base}/api/v1/alerts", timeout=10).json()["transitions"]
                by_status = {t["status"]: t["deliveries"] for t in history
                             if t["labels"]["alertname"] == "StoreFailing"}
                assert by_status == {"firing": {"webhook-rx": "sent"}, "resolved": {"webhook-rx": "sent"}}
        finally:
            with admin.connect() as conn:  # the fixture drops it
                conn.execute(text(f'CREATE DATABASE "{name}"') if not conn.execute(
                    text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar() else text("SELECT 1"))
            admin.dispose()
