"""`infermon db upgrade`: migrate storage.url to head and say from where to where."""

from __future__ import annotations

from pathlib import Path

import typer
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from monitor.store.migrate import upgrade


def describe_error(url: str, exc: SQLAlchemyError) -> str:
    """`<url without its password>: <error>: <the driver's first line>` (refused, auth failed, ...)."""
    reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
    return f"{make_url(url).render_as_string(hide_password=True)}: {type(exc).__name__}: {reason}"


def upgrade_command(url: str) -> int:
    """Exit status: 0 at head, 1 when the database cannot be reached or migrated."""
    parsed = make_url(url)
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    try:
        before, after = upgrade(engine)
    except SQLAlchemyError as exc:
        typer.secho(f"cannot upgrade {describe_error(url, exc)}", err=True, fg=typer.colors.RED)
        return 1
    finally:
        engine.dispose()
    if before == after:
        typer.echo(f"{shown}: already at {after} (head)")
    else:
        typer.echo(f"{shown}: upgraded from {before or 'empty'} to {after} (head)")
    return 0
