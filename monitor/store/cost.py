"""Cumulative spend: one running total per scope and one per local day, written each cost tick.

Each total keeps the time it was brought up to and the spend rate at that time, so the next
tick (in this process or the next one, after a restart) adds rate x elapsed from exactly there:
no interval is counted twice, none is skipped.
One monitor process accrues: two replicas sharing one database would each add the same spend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, String, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from monitor.store.models import Base


class CostTotal(Base):
    """Spend since the first tick, per scope: "fleet", "idle", "target:<name>", "model:<name>"."""

    __tablename__ = "cost_totals"

    scope: Mapped[str] = mapped_column(String(300), primary_key=True)
    usd: Mapped[float] = mapped_column(Float)
    updated_ts: Mapped[float] = mapped_column(Float)  # the total includes spend up to here
    usd_per_hour: Mapped[float | None] = mapped_column(Float, nullable=True)  # the rate from here on


class CostDay(Base):
    """Spend per local day (cost.timezone) and scope ("fleet", "idle"): the budget's numerator."""

    __tablename__ = "cost_days"

    day: Mapped[str] = mapped_column(String(10), primary_key=True)  # YYYY-MM-DD
    scope: Mapped[str] = mapped_column(String(300), primary_key=True)
    usd: Mapped[float] = mapped_column(Float)


@dataclass
class Running:
    usd: float
    updated_ts: float
    usd_per_hour: float | None


class CostLedger:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def totals(self) -> dict[str, Running]:
        with Session(self.engine) as session:
            return {row.scope: Running(row.usd, row.updated_ts, row.usd_per_hour)
                    for row in session.scalars(select(CostTotal))}

    def day(self, day: str) -> dict[str, float]:
        with Session(self.engine) as session:
            return {row.scope: row.usd for row in session.scalars(select(CostDay).where(CostDay.day == day))}

    def save(self, totals: Mapping[str, Running], days: Mapping[tuple[str, str], float]) -> None:
        """Write the totals and the day sums (absolute values) in one transaction, in bulk."""
        total_rows = [{"scope": scope, "usd": r.usd, "updated_ts": r.updated_ts, "usd_per_hour": r.usd_per_hour}
                      for scope, r in totals.items()]
        day_rows = [{"day": day, "scope": scope, "usd": usd} for (day, scope), usd in days.items()]
        with Session(self.engine) as session, session.begin():
            stored = set(session.scalars(select(CostTotal.scope)))
            _upsert(session, CostTotal, total_rows, lambda row: row["scope"] in stored)
            if day_rows:
                wanted = {row["day"] for row in day_rows}
                stored_days = set(session.execute(select(CostDay.day, CostDay.scope).where(CostDay.day.in_(wanted))))
                _upsert(session, CostDay, day_rows, lambda row: (row["day"], row["scope"]) in stored_days)


def _upsert(
    session: Session, table: type[Base], rows: list[dict[str, Any]], exists: Callable[[dict[str, Any]], bool]
) -> None:
    # ORM bulk UPDATE by primary key and bulk INSERT: two statements, on SQLite and PostgreSQL alike.
    updates = [row for row in rows if exists(row)]
    inserts = [row for row in rows if not exists(row)]
    if updates:
        session.execute(update(table), updates)
    if inserts:
        session.execute(insert(table), inserts)
