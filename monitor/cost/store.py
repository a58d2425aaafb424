"""The cost layer's tables: cumulative spend, and the samples its $/token baseline is made of.

Spend is one running total per scope and one per local day, written each cost tick. Each total
keeps the time it was brought up to and the spend rate at that time, so the next tick (in this
process, the next one after a restart, or another replica on the same database) adds rate x
elapsed from exactly there: no interval is counted twice, none is skipped.

The baseline samples (`cost_baseline_points`) are kept like the service baselines' points: a
restarted monitor reloads them and has its $/token baseline back at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import Float, Integer, String, delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from monitor.store.conflicts import retry_conflicts
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


class SpendPoint(Base):
    """The cost layer's $/token baseline samples: (time, spend $/h, generated tokens/s) per model x window."""

    __tablename__ = "cost_baseline_points"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(String(300))
    window: Mapped[str] = mapped_column(String(32))
    ts: Mapped[float] = mapped_column(Float, index=True)
    usd_per_hour: Mapped[float] = mapped_column(Float)
    tokens_per_second: Mapped[float] = mapped_column(Float)


Spend = tuple[str, str, float, float, float]
"""(model, window, ts, usd_per_hour, generated tokens/s)"""


class SpendPoints:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def save(self, points: Iterable[Spend], before_ts: float) -> None:
        rows = [SpendPoint(model=m, window=w, ts=ts, usd_per_hour=usd, tokens_per_second=tps)
                for m, w, ts, usd, tps in points]
        with Session(self.engine) as session, session.begin():
            session.add_all(rows)
            session.execute(delete(SpendPoint).where(SpendPoint.ts < before_ts))

    def load(self, since_ts: float) -> list[Spend]:
        query = select(SpendPoint).where(SpendPoint.ts > since_ts).order_by(SpendPoint.ts)
        with Session(self.engine) as session:
            return [(r.model, r.window, r.ts, r.usd_per_hour, r.tokens_per_second) for r in session.scalars(query)]


@dataclass
class Running:
    usd: float
    updated_ts: float
    usd_per_hour: float | None


Spent = Callable[[str, Running, float], list[tuple[str, float]]]
"""(scope, its total as stored, now) -> what it spent since, as (local day, USD) pieces"""


class CostLedger:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def accrue(self, now: float, rates: Mapping[str, float | None], spent: Spent, daily: frozenset[str],
               today: str) -> tuple[dict[str, float], dict[str, float]]:
        """Bring every total up to `now` from where the database says it stands, and set the rates
        that hold from now on. One transaction, rows locked (PostgreSQL; SQLite serialises writers),
        so neither a restart nor a second replica ever counts an interval twice.

        Returns every scope's total and today's sums of the `daily` scopes. Two replicas creating
        the same total on a fresh database: the second runs again and adds to the first's.
        """
        return retry_conflicts(lambda: self._accrue_once(now, rates, spent, daily, today))

    def _accrue_once(self, now: float, rates: Mapping[str, float | None], spent: Spent, daily: frozenset[str],
                     today: str) -> tuple[dict[str, float], dict[str, float]]:
        with Session(self.engine) as session, session.begin():
            rows = {row.scope: row for row in session.scalars(select(CostTotal).with_for_update())}
            added: dict[tuple[str, str], float] = {}
            for scope in sorted(set(rows) | {s for s, rate in rates.items() if rate is not None}):
                row = rows.get(scope)
                if row is None:
                    row = rows[scope] = CostTotal(scope=scope, usd=0.0, updated_ts=now, usd_per_hour=None)
                    session.add(row)
                for day, usd in spent(scope, Running(row.usd, row.updated_ts, row.usd_per_hour), now):
                    row.usd += usd
                    if scope in daily:
                        added[(day, scope)] = added.get((day, scope), 0.0) + usd
                row.updated_ts = max(row.updated_ts, now)  # a clock stepping back counts nothing twice
                row.usd_per_hour = rates.get(scope)
            days = {today} | {day for day, _ in added}
            stored = {(d.day, d.scope): d for d in
                      session.scalars(select(CostDay).where(CostDay.day.in_(days)).with_for_update())}
            for (day, scope), usd in added.items():
                if (day, scope) not in stored:
                    stored[(day, scope)] = CostDay(day=day, scope=scope, usd=0.0)
                    session.add(stored[(day, scope)])
                stored[(day, scope)].usd += usd
            totals = {scope: row.usd for scope, row in rows.items()}
            return totals, {scope: row.usd for (day, scope), row in stored.items() if day == today}
