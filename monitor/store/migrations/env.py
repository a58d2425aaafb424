"""Alembic environment: runs on the connection that `monitor.store.migrate` hands over
(config.attributes["connection"]), or on `sqlalchemy.url` when alembic's own CLI runs it.

Upgrading needs no models. Autogenerate compares against config.attributes["target_metadata"],
every layer's tables on one MetaData (`monitor.schema`), which the store cannot import: without
it alembic refuses to autogenerate rather than see the layers' tables as ones to drop."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

config = context.config


def _run(connection: Connection) -> None:
    # render_as_batch: SQLite cannot ALTER most things; batch mode copies the table instead
    context.configure(connection=connection, target_metadata=config.attributes.get("target_metadata"),
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "sqlite:///./infermon.db")
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()
