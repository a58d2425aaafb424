"""Alert state across restarts: one row per pending or firing alert of the embedded evaluator.

A firing alert keeps its `fired_at` (Alertmanager's startsAt) and is not announced again after
a restart; a pending one keeps its `active_at`, so `for` counts from when it really began.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import Float, String, Text, delete, select
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
    """Apply one evaluation's changes in one transaction (again if another replica inserted one
    of the same rows at the same moment: `merge` then updates theirs)."""
    upserts, deletes = list(upserts), list(deletes)
    retry_conflicts(lambda: _save_once(engine, upserts, deletes))


def _save_once(engine: Engine, upserts: list[StoredAlert], deletes: list[tuple[str, str]]) -> None:
    with Session(engine) as session, session.begin():
        for rule, fp in deletes:
            session.execute(delete(AlertStateRow).where(AlertStateRow.rule == rule, AlertStateRow.fingerprint == fp))
        for alert in upserts:
            session.merge(AlertStateRow(
                rule=alert.rule, fingerprint=alert.fingerprint, labels=json.dumps(dict(alert.labels), sort_keys=True),
                annotations=json.dumps(dict(alert.annotations), sort_keys=True), state=alert.state,
                active_at=alert.active_at, fired_at=alert.fired_at, keep_firing_since=alert.keep_firing_since,
                value=alert.value))
