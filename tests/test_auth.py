"""The bearer token on POST endpoints: required when set, compared exactly, never echoed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from fastapi import Depends, FastAPI
from pydantic import SecretStr

from monitor.auth import bearer_guard
from monitor.config import load_settings
from tests.appserver import serve_asgi


@contextmanager
def _app(token: str | None) -> Iterator[httpx.Client]:
    app = FastAPI()

    @app.post("/guarded", dependencies=[Depends(bearer_guard(SecretStr(token) if token else None))])
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


def test_no_token_means_open() -> None:
    with _app(None) as client:
        assert client.post("/guarded").status_code == 200


def test_token_from_environment_is_secret(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("INFERMON_API__TOKEN", "from-env-123")
    settings = load_settings()
    assert settings.api.token is not None and settings.api.token.get_secret_value() == "from-env-123"
    assert "from-env-123" not in repr(settings) and "from-env-123" not in settings.model_dump_json()
