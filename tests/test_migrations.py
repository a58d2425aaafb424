"""Alembic migrations on SQLite and a real PostgreSQL: a fresh database, one at each earlier
revision and one made by create_all before migrations existed all end at head, and the
migrated schema equals the models (autogenerate finds nothing to do)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from monitor.cli import app
from monitor.schema import metadata
from monitor.store import migrate
from monitor.store.models import Base
from monitor.store.session import Store

EARLIER = ["base", *migrate.revisions()[:-1]]  # every revision a database can be at before head


def schema_diff(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(compare_metadata(MigrationContext.configure(conn), metadata))


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def test_revisions_form_one_line() -> None:
    assert migrate.revisions()[-1] == migrate.head()
    assert len(set(migrate.revisions())) == len(migrate.revisions())


def test_fresh_database_is_migrated_to_head_by_the_store(store_url: str) -> None:
    store = Store(store_url)
    try:
        assert migrate.current(store.engine) == migrate.head()
        assert tables(store.engine) == set(metadata.tables) | {"alembic_version"}
        assert schema_diff(store.engine) == []
        store.record_event(1.0, "service", "a", "down", "HTTP 503")
        assert store.recent_events()[0]["error"] == "HTTP 503"
    finally:
        store.close()


@pytest.mark.parametrize("revision", EARLIER)
def test_each_earlier_revision_upgrades_to_head(store_url: str, revision: str) -> None:
    engine = create_engine(store_url)
    if revision != "base":
        migrate.upgrade(engine, revision)
    assert migrate.current(engine) == (None if revision == "base" else revision)
    engine.dispose()
    store = Store(store_url)
    try:
        assert migrate.current(store.engine) == migrate.head()
        assert schema_diff(store.engine) == []
    finally:
        store.close()


def test_downgrade_to_base_and_up_again(store_url: str) -> None:
    engine = create_engine(store_url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        command.downgrade(migrate.alembic_config(conn), "base")
    assert tables(engine) == {"alembic_version"}
    migrate.upgrade(engine)
    assert schema_diff(engine) == []
    engine.dispose()


@pytest.mark.parametrize("created", ["all", "some"])
def test_database_from_before_migrations_joins_at_head(store_url: str, created: str) -> None:
    """Made by the old create_all (all tables, or those of an older release), no alembic_version:
    the store keeps its rows, creates what is missing and records head."""
    engine = create_engine(store_url)
    chosen = list(metadata.tables.values()) if created == "all" else [metadata.tables["collector_events"]]
    Base.metadata.create_all(engine, tables=chosen)
    with engine.begin() as conn:
        conn.execute(metadata.tables["collector_events"].insert(),
                     {"ts": 5.0, "collector": "infra", "target": "", "state": "down", "error": "kept"})
    engine.dispose()
    store = Store(store_url)
    try:
        assert migrate.current(store.engine) == migrate.head()
        assert schema_diff(store.engine) == []
        assert [e["error"] for e in store.recent_events()] == ["kept"]
    finally:
        store.close()


def test_replicas_starting_together_migrate_once(pg_url: str) -> None:
    """Two processes' stores on one fresh PostgreSQL database: the advisory lock serialises them."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        try:
            barrier.wait(timeout=10)
            Store(pg_url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    engine = create_engine(pg_url)
    assert migrate.current(engine) == migrate.head()
    engine.dispose()


def test_cli_db_upgrade(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERMON_STORAGE__URL", store_url)
    first = CliRunner().invoke(app, ["db", "upgrade"])
    assert first.exit_code == 0, first.output
    assert f"upgraded from empty to {migrate.head()} (head)" in first.output
    again = CliRunner().invoke(app, ["db", "upgrade"])
    assert again.exit_code == 0
    assert f"already at {migrate.head()} (head)" in again.output


def test_cli_db_upgrade_unreachable_server_hides_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    from monitor.ports import free_port

    port = free_port()  # nobody listens there
    monkeypatch.setenv("INFERMON_STORAGE__URL", f"postgresql+psycopg://monitor:s3cret@127.0.0.1:{port}/infermon")
    result = CliRunner().invoke(app, ["db", "upgrade"])
    assert result.exit_code == 1
    assert "cannot upgrade postgresql+psycopg://monitor:***@127.0.0.1" in result.output
    assert "s3cret" not in result.output


def test_serve_with_an_unreachable_database_says_so_without_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    from monitor.ports import free_port

    monkeypatch.setenv("INFERMON_STORAGE__URL", f"postgresql+psycopg://monitor:s3cret@127.0.0.1:{free_port()}/x")
    result = CliRunner().invoke(app, ["serve", "--port", "0"])
    assert result.exit_code == 1
    assert "database error: postgresql+psycopg://monitor:***@127.0.0.1" in result.output
    assert "Connection refused" in result.output and "s3cret" not in result.output
