"""The store: one engine per process, short transactions, retention by age."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from sqlalchemy import create_engine, delete, select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from monitor.store.migrate import upgrade
from monitor.store.models import CollectorEvent


class EventRow(TypedDict):
    """A collector's state change, as the overview and /api/v1/status list them."""

    ts: float
    collector: str
    target: str | None
    state: str  # down | up
    error: str | None


class Store:
    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        options: dict[str, Any] = {}
        if parsed.get_backend_name() == "sqlite":
            if parsed.database in (None, "", ":memory:"):
                # One shared connection, or every thread would see its own empty database.
                options = {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
            else:
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        self.memory = bool(options)
        self.engine: Engine = create_engine(url, **options)
        upgrade(self.engine)  # the migrations create or bring every table to head (SQLite and PostgreSQL)

    def record_event(self, ts: float, collector: str, target: str, state: str, error: str | None) -> None:
        with Session(self.engine) as session, session.begin():
            session.add(CollectorEvent(ts=ts, collector=collector, target=target, state=state, error=error))

    def recent_events(self, limit: int = 50) -> list[EventRow]:
        with Session(self.engine) as session:
            rows = session.scalars(select(CollectorEvent).order_by(CollectorEvent.id.desc()).limit(limit))
            return [
                {"ts": r.ts, "collector": r.collector, "target": r.target or None, "state": r.state, "error": r.error}
                for r in rows
            ]

    def prune(self, before_ts: float) -> int:
        with Session(self.engine) as session, session.begin():
            result = session.execute(delete(CollectorEvent).where(CollectorEvent.ts < before_ts))
            return int(getattr(result, "rowcount", 0) or 0)

    def close(self) -> None:
        if not self.memory:  # disposing the one in-memory connection would drop the database
            self.engine.dispose()
