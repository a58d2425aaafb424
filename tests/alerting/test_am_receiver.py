"""POST /api/v1/alertmanager on the real app: the bearer token, dedup of Alertmanager's
at-least-once deliveries, 503 while the database is down, and no secret anywhere."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine

from monitor.config import load_settings
from monitor.runtime import Monitor
from tests.alerting.alertmanager_payload import am_payload
from tests.alerting.helpers import receiver_data, wait_for
from tests.alerting.imserver import BEARER, KINDS, SECRETS, TOKENS, ImServer
from tests.support.appserver import serve_app

API_TOKEN = "api-token-7d1e0b55"
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


@contextmanager
def monitor_app(im: ImServer, token: str | None = API_TOKEN,
                **extra: dict[str, Any]) -> Iterator[tuple[Monitor, httpx.Client]]:
    overrides: dict[str, Any] = {"alerting": {"receivers": [receiver_data(im, kind) for kind in KINDS]}, **extra}
    if token:
        overrides.setdefault("api", {})["token"] = token
    monitor = Monitor(load_settings(None, overrides))
    with serve_app(monitor) as url, httpx.Client(base_url=url, timeout=10) as client:
        yield monitor, client



def test_token_required() -> None:
    with ImServer() as im, monitor_app(im) as (_, client):
        assert client.post("/api/v1/alertmanager", json=am_payload()).status_code == 401
        wrong = client.post("/api/v1/alertmanager", json=am_payload(), headers={"Authorization": "Bearer x"})
        assert wrong.status_code == 401 and API_TOKEN not in wrong.text
        assert client.post("/api/v1/alertmanager", json=am_payload(), headers=AUTH).status_code == 200


def test_same_payload_twice_is_one_message() -> None:
    with ImServer() as im, monitor_app(im) as (monitor, client):
        first = client.post("/api/v1/alertmanager", json=am_payload(), headers=AUTH)
        again = client.post("/api/v1/alertmanager", json=am_payload(), headers=AUTH)
        assert first.json()["new_transitions"] == 1 and again.json()["new_transitions"] == 0
        wait_for(lambda: all(len(im.accepted(k)) == 1 for k in TOKENS))
        delivery = monitor.delivery
        wait_for(lambda: sum(n for (_, outcome), n in delivery.counts.items() if outcome == "sent") == 5)
        third = client.post("/api/v1/alertmanager", json=am_payload(), headers=AUTH)  # a third, later
        assert third.json()["new_transitions"] == 0
        time.sleep(2.2)  # two more sender runs
        assert [len(im.accepted(k)) for k in TOKENS] == [1] * 5
        assert sum(n for (_, outcome), n in delivery.counts.items() if outcome == "sent") == 5
        client.post("/api/v1/alertmanager", json=am_payload("resolved"), headers=AUTH)
        wait_for(lambda: len(im.accepted("webhook")) == 2)
        assert im.accepted("webhook")[1]["status"] == "resolved"


def test_database_down_answers_503_and_alertmanager_retries() -> None:
    with ImServer() as im, monitor_app(im) as (monitor, client):
        outbox = monitor.delivery.outbox
        healthy = outbox.engine
        outbox.engine = create_engine("sqlite:////proc/no-such-dir/outbox.db")
        try:
            down = client.post("/api/v1/alertmanager", json=am_payload(), headers=AUTH)
        finally:
            outbox.engine.dispose()
            outbox.engine = healthy
        assert down.status_code == 503
        assert client.post("/api/v1/alertmanager", json=am_payload(), headers=AUTH).status_code == 200
        wait_for(lambda: len(im.accepted("wecom")) == 1)


def test_bad_payload_is_rejected() -> None:
    with ImServer() as im, monitor_app(im, token=None, api={"allow_unauthenticated": True}) as (_, client):
        assert client.post("/api/v1/alertmanager", json={"alerts": [{"status": "odd"}]}).status_code == 422
        assert client.post("/api/v1/alertmanager", json=am_payload()).status_code == 200  # opened explicitly


def test_no_secret_in_logs_errors_or_responses(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with ImServer() as im, monitor_app(im) as (monitor, client):
        for kind in TOKENS:
            im.down(kind)
        client.post("/api/v1/alertmanager", json=am_payload(gpu="1"), headers=AUTH)
        wait_for(lambda: all(im.attempts(k) >= 2 for k in TOKENS))
        for kind in TOKENS:
            im.up(kind)
        wait_for(lambda: all(len(im.accepted(k)) == 1 for k in TOKENS))
        pages = [client.get(p).text for p in ("/api/v1/status", "/metrics")]
        wrong = {"Authorization": "Bearer no"}
        pages.append(client.post("/api/v1/alertmanager", json=am_payload(), headers=wrong).text)
        pages.append(repr(monitor.settings) + monitor.settings.model_dump_json())
        pages.append(str(monitor.delivery.recent(10)))
    assert "send failed" in caplog.text  # the outage was logged ...
    assert "<secret>" in caplog.text or "HTTP Request" not in caplog.text
    for secret in (*TOKENS.values(), *SECRETS.values(), BEARER, API_TOKEN):
        assert secret not in caplog.text  # ... without the URL's token, a secret or the api token
        for page in pages:
            assert secret not in page
