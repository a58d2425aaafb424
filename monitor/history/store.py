"""The long-horizon history on disk: one row per series and UTC day, its 5-minute points as a blob.

A trend needs weeks of a few series per model (P99 latencies, throughput, error ratio, $/1M
tokens, the daily quality figures). A row per point would be 288 rows a series a day; a day of
points is one row here: 288 little-endian float64 (NaN where no point was kept), 2,304 bytes,
written again as the day fills. The series are named once (`history_series`: metric name and
labels as JSON) and referred to by id.

Rows older than the retention are deleted as new ones are written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Integer, LargeBinary, String, Text, delete, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from monitor.store.conflicts import retry_conflicts
from monitor.store.models import Base

STEP = 300  # seconds between two points: a point at t is the mean of the values in (t - STEP, t]
DAY = 86400
SLOTS = DAY // STEP  # points in a day


class HistorySeries(Base):
    __tablename__ = "history_series"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(1000), unique=True)  # name + sorted labels, as JSON
    name: Mapped[str] = mapped_column(String(200), index=True)
    labels: Mapped[str] = mapped_column(Text)  # JSON object, without __name__


class HistoryDay(Base):
    __tablename__ = "history_days"

    series_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    day: Mapped[int] = mapped_column(Integer, primary_key=True, index=True)  # days since 1970-01-01 UTC
    points: Mapped[bytes] = mapped_column(LargeBinary)  # SLOTS float64, NaN: no point


Labels = Mapping[str, str]


def series_key(name: str, labels: Labels) -> str:
    return json.dumps([name, sorted((k, v) for k, v in labels.items() if k != "__name__")], separators=(",", ":"))


def empty_day() -> np.ndarray:
    return np.full(SLOTS, np.nan)


@dataclass(frozen=True)
class StoredDay:
    name: str
    labels: dict[str, str]  # without __name__
    day: int
    points: np.ndarray  # SLOTS values, NaN where none


class HistoryTables:
    """The history's rows: write days (as they fill) and read them back, through one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._ids: dict[str, int] = {}

    def write(self, days: Iterable[StoredDay], keep_from_day: int | None = None) -> int:
        """Write (insert or replace) the given series-days; drop days before `keep_from_day`."""
        days = list(days)
        return retry_conflicts(lambda: self._write(days, keep_from_day))

    def _write(self, days: list[StoredDay], keep_from_day: int | None) -> int:
        with Session(self.engine) as session, session.begin():
            rows = [{"series_id": self._series_id(session, d.name, d.labels), "day": d.day,
                     "points": np.ascontiguousarray(d.points, dtype="<f8").tobytes()} for d in days]
            if rows:  # one upsert statement for them all (a 5-minute point rewrites every series' day)
                insert = (postgresql_insert if self.engine.dialect.name == "postgresql" else sqlite_insert)(HistoryDay)
                session.execute(insert.on_conflict_do_update(index_elements=["series_id", "day"],
                                                             set_={"points": insert.excluded.points}), rows)
            if keep_from_day is not None:
                session.execute(delete(HistoryDay).where(HistoryDay.day < keep_from_day))
        return len(days)

    def _series_id(self, session: Session, name: str, labels: Labels) -> int:
        key = series_key(name, labels)
        known = self._ids.get(key)
        if known is not None:
            return known
        found = session.scalar(select(HistorySeries.id).where(HistorySeries.key == key))
        if found is None:
            row = HistorySeries(key=key, name=name, labels=json.dumps(dict(sorted(labels.items()))))
            session.add(row)
            session.flush()
            found = row.id
        self._ids[key] = found
        return found

    def read(self, from_day: int, names: Iterable[str] | None = None) -> list[StoredDay]:
        """Every stored day from `from_day` on (of the metrics `names`, or all), oldest first."""
        query = (select(HistorySeries.name, HistorySeries.labels, HistoryDay.day, HistoryDay.points)
                 .join(HistoryDay, HistoryDay.series_id == HistorySeries.id)
                 .where(HistoryDay.day >= from_day).order_by(HistoryDay.day))
        if names is not None:
            query = query.where(HistorySeries.name.in_(sorted(set(names))))
        with Session(self.engine) as session:
            return [StoredDay(name, json.loads(labels), day, np.frombuffer(points, dtype="<f8").copy())
                    for name, labels, day, points in session.execute(query)]

    def size(self) -> tuple[int, int]:
        """(series, series-days) stored."""
        with Session(self.engine) as session:
            series = session.scalar(select(HistorySeries.id).order_by(HistorySeries.id.desc()).limit(1)) or 0
            days = len(session.scalars(select(HistoryDay.day)).all())
        return int(series), days
