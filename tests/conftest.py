import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def require_binary(name: str) -> str:
    """The path of a real binary (prometheus, promtool); in CI a missing one fails the run."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not found: install the Debian package 'prometheus' (apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(autouse=True)
def _memory_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Monitors built by tests keep their history in memory, not in ./infermon.db."""
    monkeypatch.setenv("INFERMON_STORAGE__URL", "sqlite://")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """One private PostgreSQL cluster for the whole run, started on first use (tests/postgres.py)."""
    from tests.postgres import postgres_server

    with postgres_server() as url:
        yield url


@pytest.fixture
def pg_url(pg_server: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database on the tests' PostgreSQL server."""
    from tests.postgres import fresh_database

    with fresh_database(pg_server, request.node.name) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The storage tests run on both databases: a SQLite file and a real PostgreSQL server.
    Also set as INFERMON_STORAGE__URL, which wins over the tests' default in-memory store."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'history.db'}"
    else:
        url = str(request.getfixturevalue("pg_url"))
    monkeypatch.setenv("INFERMON_STORAGE__URL", url)
    return url
