"""Alerting's tables: the alert states that outlive a restart, and the outbox.

    alert_state           one row per pending or firing alert of the embedded evaluator
    alert_transitions     one row per distinct transition (fingerprint + status + startsAt/endsAt)
    outbox_members        the alerts each receiver's group currently holds (latest transition each)
    outbox_groups         a receiver's aggregation group: when it flushes next, what it last notified
    outbox_notifications  one message for one receiver, kept until it is sent, fails or expires

A firing alert keeps its `fired_at` (Alertmanager's startsAt) and is not announced again after
a restart; a pending one keeps its `active_at`, so `for` counts from when it really began.
Every transition and notification is written before anything is sent, so a restart (or
`kill -9`) loses nothing. Times are Unix seconds; label sets and payloads are JSON text
(portable across SQLite/PostgreSQL). The outbox's queries are in `monitor.alerting.outbox`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Float, Index, Integer, String, Table, Text, UniqueConstraint, bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from monitor.store.conflicts import retry_conflicts
from monitor.store.models import Base


class AlertStateRow(Base):
    __tablename__ = "alert_state"

    rule: Mapped[str] = mapped_column(String(512), primary_key=True)  # AlertRule.key
    fingerprint: Mapped[str] = mapped_column(String(16), primary_key=True)
    labels: Mapped[str] = mapped_column(Text)  # JSON object
    annotations: Mapped[str] = mapped_column(Text)  # JSON object, as last rendered
    state: Mapped[str] = mapped_column(String(16))  # "pending" | "firing"
    active_at: Mapped[float] = mapped_column(Float)
    fired_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    keep_firing_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    value: Mapped[float] = mapped_column(Float)


@dataclass(frozen=True)
class StoredAlert:
    rule: str
    fingerprint: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    state: str
    active_at: float
    fired_at: float | None
    keep_firing_since: float | None
    value: float


def load_alert_states(engine: Engine) -> list[StoredAlert]:
    with Session(engine) as session:
        return [
            StoredAlert(r.rule, r.fingerprint, json.loads(r.labels), json.loads(r.annotations), r.state,
                        r.active_at, r.fired_at, r.keep_firing_since, r.value)
            for r in session.scalars(select(AlertStateRow))
        ]


def save_alert_states(engine: Engine, upserts: Iterable[StoredAlert], deletes: Iterable[tuple[str, str]]) -> None:
    """Apply one evaluation's changes in one transaction: the rows inserted or, where another
    replica (or an earlier save) wrote the same alert, updated, all in one statement
    (`INSERT ... ON CONFLICT DO UPDATE`). A `merge` per row (a SELECT, then an INSERT or UPDATE)
    keeps the store thread busy for long when many alerts change at once, holding the interpreter
    the scrapes need."""
    upserts, deletes = list(upserts), list(deletes)
    retry_conflicts(lambda: _save_once(engine, upserts, deletes))


_TABLE = cast(Table, AlertStateRow.__table__)
_KEY = ("rule", "fingerprint")


def _save_once(engine: Engine, upserts: list[StoredAlert], deletes: list[tuple[str, str]]) -> None:
    with engine.begin() as conn:
        if deletes:
            conn.execute(delete(_TABLE).where(_TABLE.c.rule == bindparam("gone_rule"),
                                              _TABLE.c.fingerprint == bindparam("gone_fingerprint")),
                         [{"gone_rule": rule, "gone_fingerprint": fp} for rule, fp in deletes])
        if not upserts:
            return
        rows = [{"rule": alert.rule, "fingerprint": alert.fingerprint,
                 "labels": json.dumps(dict(alert.labels), sort_keys=True),
                 "annotations": json.dumps(dict(alert.annotations), sort_keys=True), "state": alert.state,
                 "active_at": alert.active_at, "fired_at": alert.fired_at,
                 "keep_firing_since": alert.keep_firing_since, "value": alert.value} for alert in upserts]
        if conn.dialect.name == "postgresql":
            conn.execute(_upsert(postgresql.insert(_TABLE)), rows)
        elif conn.dialect.name == "sqlite":
            conn.execute(_upsert(sqlite.insert(_TABLE)), rows)
        else:  # no ON CONFLICT: one row at a time
            with Session(bind=conn) as session:
                for row in rows:
                    session.merge(AlertStateRow(**row))
                session.flush()


def _upsert(insert: postgresql.Insert | sqlite.Insert) -> postgresql.Insert | sqlite.Insert:
    return insert.on_conflict_do_update(
        index_elements=list(_KEY),
        set_={column.name: insert.excluded[column.name] for column in _TABLE.columns if column.name not in _KEY})


class AlertTransition(Base):
    __tablename__ = "alert_transitions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dedup_key: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of fingerprint/status/times
    created_at: Mapped[float] = mapped_column(Float, index=True)
    source: Mapped[str] = mapped_column(String(16))  # embedded | alertmanager
    fingerprint: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(8))  # firing | resolved
    labels: Mapped[str] = mapped_column(Text)
    annotations: Mapped[str] = mapped_column(Text)
    starts_at: Mapped[float] = mapped_column(Float)
    ends_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    generator_url: Mapped[str] = mapped_column(Text, default="")


class OutboxGroup(Base):
    __tablename__ = "outbox_groups"
    __table_args__ = (UniqueConstraint("receiver", "group_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    receiver: Mapped[str] = mapped_column(String(128))
    group_key: Mapped[str] = mapped_column(String(64))
    group_labels: Mapped[str] = mapped_column(Text)
    next_flush_at: Mapped[float] = mapped_column(Float, index=True)
    last_sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    notified_firing: Mapped[str] = mapped_column(Text, default="[]")  # fingerprints in the last message
    notified_resolved: Mapped[str] = mapped_column(Text, default="[]")


class OutboxMember(Base):
    __tablename__ = "outbox_members"
    __table_args__ = (UniqueConstraint("receiver", "group_key", "fingerprint"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    receiver: Mapped[str] = mapped_column(String(128))
    group_key: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(16))
    transition_id: Mapped[int] = mapped_column(Integer)


class OutboxNotification(Base):
    __tablename__ = "outbox_notifications"
    __table_args__ = (Index("ix_outbox_notifications_due", "state", "receiver", "next_attempt_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    receiver: Mapped[str] = mapped_column(String(128))
    group_key: Mapped[str] = mapped_column(String(64))
    group_labels: Mapped[str] = mapped_column(Text)
    transition_ids: Mapped[str] = mapped_column(Text)  # JSON list: the alerts this message carries
    # A message that carries no alerts (the weekly digest): its JSON, {"title", "text", "document"};
    # its group_key is its idempotency key ("digest:<ISO date>"), one per receiver.
    payload: Mapped[str | None] = mapped_column(Text, nullable=True)
    truncated_alerts: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16))  # pending | sent | failed | expired
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    deadline: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
