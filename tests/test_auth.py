"""The bearer token on POST endpoints: required when set, compared exactly, never echoed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from fastapi import Depends, FastAPI
from pydantic import SecretStr

from monitor.app import create_app
from monitor.auth import bearer_guard, write_access
from monitor.config import ConfigError, load_settings
from monitor.runtime import Monitor
from tests.support.appserver import serve_app, serve_asgi


@contextmanager
def _app(token: str | None, allow_unauthenticated: bool = False) -> Iterator[httpx.Client]:
    app = FastAPI()

    guard = bearer_guard(SecretStr(token) if token else None, allow_unauthenticated)

    @app.post("/guarded", dependencies=[Depends(guard)])
    async def guarded() -> dict[str, bool]:
        return {"ok": True}

    with serve_asgi(app) as url, httpx.Client(base_url=url) as client:
        yield client


def test_token_required_when_set() -> None:
    with _app("s3cret-token") as client:
        _check_guarded(client)


def _check_guarded(client: httpx.Client) -> None:
    assert client.post("/guarded").status_code == 401
    wrong = client.post("/guarded", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "s3cret-token" not in wrong.text
    assert client.post("/guarded", headers={"Authorization": "Basic s3cret-token"}).status_code == 401
    assert client.post("/guarded", headers={"Authorization": "Bearer s3cret-token"}).json() == {"ok": True}


def test_no_token_is_refused_unless_opened() -> None:
    with _app(None) as client:
        refused = client.post("/guarded")
        assert refused.status_code == 403 and "api.token" in refused.json()["detail"]
    with _app(None, allow_unauthenticated=True) as client:
        assert client.post("/guarded").status_code == 200


def test_empty_token_is_a_config_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("INFERMON_API__TOKEN", "")
    with pytest.raises(ConfigError, match=r"api\.token: empty"):
        load_settings()
    monkeypatch.setenv("INFERMON_API__TOKEN", "   ")
    with pytest.raises(ConfigError, match=r"api\.token: empty"):
        load_settings()


@pytest.mark.parametrize(("server", "api", "open_", "says"), [
    ({"host": "0.0.0.0"}, {}, False, "refused"),
    ({"host": "10.0.0.5"}, {}, False, "refused"),
    ({"host": "127.0.0.1"}, {}, True, "loopback"),
    ({"host": "::1"}, {}, True, "loopback"),
    ({"host": "localhost"}, {}, True, "loopback"),
    ({"host": "0.0.0.0"}, {"allow_unauthenticated": True}, True, "allow_unauthenticated"),
    ({"host": "127.0.0.1"}, {"token": "t0ken-xyz"}, False, "bearer token required"),
])
def test_who_may_write(server: dict[str, object], api: dict[str, object], open_: bool, says: str) -> None:
    access = write_access(load_settings(None, {"server": server, "api": api}))
    assert access.open is open_ and says in access.reason
    assert "t0ken-xyz" not in access.reason


def test_start_up_says_who_may_write(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="monitor.app")
    create_app(Monitor(load_settings(None, {"infra": {"nvml": {"enabled": False}}})), schedule=False)
    assert "write routes" in caplog.text and "refused: no api.token and the server binds to 0.0.0.0" in caplog.text


def test_unauthenticated_writes_refused_on_the_real_routes() -> None:
    monitor = Monitor(load_settings(None, {"infra": {"nvml": {"enabled": False}}}))
    with serve_app(monitor) as url:
        for path in ("/api/v1/alertmanager", "/api/v1/samples"):
            answer = httpx.post(f"{url}{path}", json={"alerts": []})
            assert answer.status_code == 403, path
        bare = httpx.post(f"{url}/api/v1/alertmanager", json={}, headers={"Authorization": "Bearer"})
        assert bare.status_code == 403


def test_token_from_environment_is_secret(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("INFERMON_API__TOKEN", "from-env-123")
    settings = load_settings()
    assert settings.api.token is not None and settings.api.token.get_secret_value() == "from-env-123"
    assert "from-env-123" not in repr(settings) and "from-env-123" not in settings.model_dump_json()
