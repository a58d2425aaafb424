"""Schema migrations (Alembic, scripts in ./migrations): `upgrade` brings a database to head.

The Store calls it at start-up and `infermon db upgrade` calls it on demand. On PostgreSQL
the upgrade holds an advisory lock in its transaction (DDL is transactional there), so two
replicas starting together migrate once: the second waits, then finds the schema at head.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, text
from sqlalchemy.engine import Connection, Engine

log = logging.getLogger("monitor.store.migrate")
# Alembic says "Context impl ..." each time a context is made: once per start is our own line below.
logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING)

SCRIPTS = Path(__file__).with_name("migrations")
LOCK_KEY = 0x1F3E_4D0B  # pg_advisory_xact_lock key: "infermon schema"


def alembic_config(connection: Connection | None = None, metadata: MetaData | None = None) -> Config:
    """`metadata`: every table the models define, which only autogenerate needs (see migrations/env.py)."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    if connection is not None:
        config.attributes["connection"] = connection
    if metadata is not None:
        config.attributes["target_metadata"] = metadata
    return config


@lru_cache(maxsize=1)
def head() -> str:
    found = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert found is not None, "no migration scripts"
    return found


def revisions() -> list[str]:
    """Every revision, oldest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def current(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Migrate to `revision`; returns (revision before, revision after)."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
        before = MigrationContext.configure(conn).get_current_revision()
        if before != head() or revision != "head":
            command.upgrade(alembic_config(conn), revision)
        after = MigrationContext.configure(conn).get_current_revision()
    if before != after:
        log.info("database schema upgraded from %s to %s", before or "empty", after)
    return before, after


def new_revision(message: str, metadata: MetaData) -> None:
    """Write the next migration script: autogenerate from `metadata` (every layer's tables) against a
    database at head. (`python -m monitor.schema "add table x"`, then read and tidy what it wrote.)"""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import StaticPool

    engine = create_engine("sqlite://", poolclass=StaticPool)
    upgrade(engine)
    number = f"{len(revisions()) + 1:04d}"
    with engine.begin() as conn:
        command.revision(alembic_config(conn, metadata), message=message, autogenerate=True, rev_id=number)
    engine.dispose()
