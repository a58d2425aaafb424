"""What the service baselines need across restarts: per target, the baseline series at a coarse cadence.

A baseline (trailing hour of generation tokens, request lengths) takes its whole window to cover;
a restarted monitor that reloads these points has its baseline back at once instead of being
blind for an hour. One row per target and point in time, the series as JSON:

    {"counters": {"generation_tokens": {"<model>": [[labels, value], ...]}},
     "buckets":  {"generation_len": {"<model>": [[labels, le, value], ...]}}}

Rows older than the baseline needs are pruned as new ones are written. The cost layer keeps its
$/token baseline samples the same way (`monitor.cost.store.SpendPoints`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Float, Integer, String, Text, delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from monitor.service.extract import Snapshot
from monitor.store.models import Base


class BaselinePoint(Base):
    __tablename__ = "service_baseline_points"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    target: Mapped[str] = mapped_column(String(300), index=True)
    ts: Mapped[float] = mapped_column(Float, index=True)
    engine: Mapped[str] = mapped_column(String(64))  # the engine table the series were read with
    generation: Mapped[str] = mapped_column(String(64))
    series: Mapped[str] = mapped_column(Text)  # JSON, as above


@dataclass(frozen=True)
class Point:
    target: str
    engine: str
    generation: str
    snapshot: Snapshot


class BaselineHistory:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def save(self, points: Iterable[Point], before_ts: float) -> None:
        """Write the new points and drop every row older than `before_ts`, in one transaction."""
        rows = [BaselinePoint(target=p.target, ts=p.snapshot.ts, engine=p.engine, generation=p.generation,
                              series=json.dumps(_encode(p.snapshot))) for p in points]
        with Session(self.engine) as session, session.begin():
            session.add_all(rows)
            session.execute(delete(BaselinePoint).where(BaselinePoint.ts < before_ts))

    def load(self, target: str, since_ts: float) -> list[Point]:
        """The target's points newer than `since_ts`, oldest first."""
        query = (select(BaselinePoint).where(BaselinePoint.target == target, BaselinePoint.ts > since_ts)
                 .order_by(BaselinePoint.ts))
        with Session(self.engine) as session:
            return [Point(r.target, r.engine, r.generation, _decode(r.ts, json.loads(r.series)))
                    for r in session.scalars(query)]


def _encode(snap: Snapshot) -> dict[str, Any]:
    return {
        "counters": {metric: {model: [[list(map(list, labels)), value] for labels, value in series.items()]
                              for model, series in by_model.items()} for metric, by_model in snap.counters.items()},
        "buckets": {metric: {model: [[list(map(list, labels)), le, value] for (labels, le), value in series.items()]
                             for model, series in by_model.items()} for metric, by_model in snap.buckets.items()},
    }


def _labels(pairs: list[list[str]]) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in pairs)


def _decode(ts: float, data: dict[str, Any]) -> Snapshot:
    return Snapshot(
        ts=ts,
        counters={metric: {model: {_labels(labels): value for labels, value in series}
                           for model, series in by_model.items()} for metric, by_model in data["counters"].items()},
        buckets={metric: {model: {(_labels(labels), le): value for labels, le, value in series}
                          for model, series in by_model.items()} for metric, by_model in data["buckets"].items()},
    )
