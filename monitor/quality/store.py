"""Quality tables: the request log, runs (one per date and model) and their judgments.

A run is created with one pending judgment row per sampled response, in one transaction;
each judgment is committed as soon as the judge answers. A process killed mid-run therefore
leaves a run whose finished judgments are kept and whose pending rows say what is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Boolean, Float, ForeignKey, Integer, String, Text, UniqueConstraint, delete, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column
from sqlalchemy.pool import StaticPool

from monitor.quality.calibration import GOLD_PREFIX
from monitor.quality.sample import Sample
from monitor.store.models import Base


class QualitySample(Base):
    """A response posted to the request log (already redacted)."""

    __tablename__ = "quality_samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(220), unique=True)
    model: Mapped[str] = mapped_column(String(256), index=True)
    ts: Mapped[float] = mapped_column(Float, index=True)
    prompt: Mapped[str] = mapped_column(Text)
    response: Mapped[str] = mapped_column(Text)
    context: Mapped[str | None] = mapped_column(Text, nullable=True)
    reference: Mapped[str | None] = mapped_column(Text, nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    output_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)


class QualityRun(Base):
    __tablename__ = "quality_runs"
    __table_args__ = (UniqueConstraint("date", "model"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    date: Mapped[str] = mapped_column(String(10), index=True)  # YYYY-MM-DD in the configured zone
    model: Mapped[str] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(16))  # running | done
    started: Mapped[float] = mapped_column(Float)
    finished: Mapped[float | None] = mapped_column(Float, nullable=True)
    available: Mapped[int] = mapped_column(Integer)  # responses of the day before sampling
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON, see checks.summarise


class QualityJudgment(Base):
    __tablename__ = "quality_judgments"
    __table_args__ = (UniqueConstraint("run_id", "sample_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("quality_runs.id", ondelete="CASCADE"), index=True)
    sample_key: Mapped[str] = mapped_column(String(220))
    ts: Mapped[float] = mapped_column(Float)
    prompt: Mapped[str] = mapped_column(Text)
    response: Mapped[str] = mapped_column(Text)
    context: Mapped[str | None] = mapped_column(Text, nullable=True)
    reference: Mapped[str | None] = mapped_column(Text, nullable=True)
    request_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    trace_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    observation_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    length_tokens: Mapped[int] = mapped_column(Integer)
    length_estimated: Mapped[bool] = mapped_column(Boolean)
    refusal_keyword: Mapped[bool] = mapped_column(Boolean)
    judged_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: still pending
    score: Mapped[int | None] = mapped_column(Integer, nullable=True)
    refusal: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    hallucination: Mapped[bool | None] = mapped_column(Boolean, nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)  # set instead of a score
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    judge_output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)


@dataclass(frozen=True)
class Verdict:
    """What the judge said about one sample (or why it could not)."""

    score: int | None
    refusal: bool | None
    hallucination: bool | None
    reason: str | None
    error: str | None
    attempts: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


class QualityStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # An in-memory SQLite database is one connection (StaticPool) that threads cannot share:
        # writes from a thread of their own would interleave with the loop's on that connection.
        self.one_connection = isinstance(engine.pool, StaticPool)

    # -- the request log ------------------------------------------------------------------
    def add_samples(self, samples: Iterable[Sample]) -> int:
        """Stores new samples; one already stored (same key) is skipped. Returns how many were new."""
        added = 0
        with Session(self.engine) as session:
            for sample in samples:
                try:
                    with session.begin():
                        session.add(_sample_row(sample))
                    added += 1
                except IntegrityError:
                    session.rollback()
        return added

    def samples_between(self, start: float, end: float) -> list[Sample]:
        with Session(self.engine) as session:
            rows = session.scalars(select(QualitySample).where(QualitySample.ts >= start, QualitySample.ts < end))
            return [
                Sample(r.model, r.prompt, r.response, r.ts, r.context, r.reference, r.request_id, r.output_tokens)
                for r in rows
            ]

    def prune_samples(self, before_ts: float) -> int:
        with Session(self.engine) as session, session.begin():
            result = session.execute(delete(QualitySample).where(QualitySample.ts < before_ts))
            return int(getattr(result, "rowcount", 0) or 0)

    # -- runs -----------------------------------------------------------------------------
    def run(self, date: str, model: str) -> QualityRun | None:
        with Session(self.engine, expire_on_commit=False) as session:
            return session.scalars(select(QualityRun).where(QualityRun.date == date, QualityRun.model == model)).first()

    def delete_run(self, run_id: int) -> None:
        with Session(self.engine) as session, session.begin():
            session.execute(delete(QualityJudgment).where(QualityJudgment.run_id == run_id))
            session.execute(delete(QualityRun).where(QualityRun.id == run_id))

    def create_run(self, date: str, model: str, started: float, available: int, rows: Sequence[dict[str, Any]]) -> int:
        """The run and one pending judgment per sampled response, in one transaction."""
        with Session(self.engine) as session, session.begin():
            run = QualityRun(date=date, model=model, status="running", started=started, available=available)
            session.add(run)
            session.flush()
            session.add_all(QualityJudgment(run_id=run.id, **row) for row in rows)
            return run.id

    def reset_run(self, run_id: int, gold_rows: Sequence[dict[str, Any]], started: float) -> None:
        """A run to be judged again: its samples pending, its known answers replaced, no summary."""
        with Session(self.engine) as session, session.begin():
            session.execute(delete(QualityJudgment).where(QualityJudgment.run_id == run_id, ~_not_gold()))
            session.execute(update(QualityJudgment).where(QualityJudgment.run_id == run_id).values(
                judged_at=None, score=None, refusal=None, hallucination=None, reason=None, error=None, attempts=0,
                input_tokens=0, judge_output_tokens=0, cost_usd=0.0))
            session.add_all(QualityJudgment(run_id=run_id, **row) for row in gold_rows)
            run = session.get_one(QualityRun, run_id)
            run.status, run.started, run.finished, run.summary = "running", started, None, None

    def pending(self, run_id: int) -> list[QualityJudgment]:
        with Session(self.engine, expire_on_commit=False) as session:
            query = select(QualityJudgment).where(QualityJudgment.run_id == run_id, QualityJudgment.judged_at.is_(None))
            return list(session.scalars(query.order_by(QualityJudgment.id)))

    def save_verdict(self, judgment_id: int, verdict: Verdict, judged_at: float) -> None:
        with Session(self.engine) as session, session.begin():
            row = session.get_one(QualityJudgment, judgment_id)
            row.judged_at = judged_at
            row.score, row.refusal, row.hallucination = verdict.score, verdict.refusal, verdict.hallucination
            row.reason, row.error, row.attempts = verdict.reason, verdict.error, verdict.attempts
            row.input_tokens, row.judge_output_tokens = verdict.input_tokens, verdict.output_tokens
            row.cost_usd = verdict.cost_usd

    def progress(self, run_id: int) -> tuple[int, int]:
        """(judged, sampled) of a run: the model's samples (the judge's known answers are not)."""
        query = select(func.count(QualityJudgment.judged_at), func.count(QualityJudgment.id)).where(
            QualityJudgment.run_id == run_id, _not_gold())
        with Session(self.engine) as session:
            judged, sampled = session.execute(query).one()
            return int(judged), int(sampled)

    def judgments(self, run_id: int) -> list[QualityJudgment]:
        with Session(self.engine, expire_on_commit=False) as session:
            query = select(QualityJudgment).where(QualityJudgment.run_id == run_id).order_by(QualityJudgment.id)
            return list(session.scalars(query))

    def finish_run(self, run_id: int, summary: dict[str, Any], finished: float) -> None:
        with Session(self.engine) as session, session.begin():
            run = session.get_one(QualityRun, run_id)
            run.status, run.finished, run.summary = "done", finished, json.dumps(summary)

    def done_runs(self, model: str | None = None, dates: Sequence[str] | None = None) -> list[QualityRun]:
        """Finished runs, newest date first."""
        query = select(QualityRun).where(QualityRun.status == "done")
        if model is not None:
            query = query.where(QualityRun.model == model)
        if dates is not None:
            query = query.where(QualityRun.date.in_(list(dates)))
        with Session(self.engine, expire_on_commit=False) as session:
            return list(session.scalars(query.order_by(QualityRun.date.desc(), QualityRun.model)))

    def runs_on(self, date: str) -> list[QualityRun]:
        with Session(self.engine, expire_on_commit=False) as session:
            return list(session.scalars(select(QualityRun).where(QualityRun.date == date).order_by(QualityRun.model)))

    def baseline_lengths(self, model: str, dates: Sequence[str]) -> list[int]:
        """Output lengths of the responses sampled on the baseline days (finished runs only)."""
        query = (
            select(QualityJudgment.length_tokens)
            .join(QualityRun, QualityRun.id == QualityJudgment.run_id)
            .where(QualityRun.model == model, QualityRun.date.in_(list(dates)), QualityRun.status == "done",
                   _not_gold())
        )
        with Session(self.engine) as session:
            return list(session.scalars(query))

    def total_judge_cost(self) -> float:
        with Session(self.engine) as session:
            return float(session.scalar(select(func.coalesce(func.sum(QualityJudgment.cost_usd), 0.0))) or 0.0)


def _not_gold() -> Any:
    """The model's own judgments: not the known answers judged among them (calibration.py)."""
    return ~QualityJudgment.sample_key.startswith(GOLD_PREFIX, autoescape=True)


def _sample_row(sample: Sample) -> QualitySample:
    return QualitySample(
        key=sample.key, model=sample.model, ts=sample.timestamp, prompt=sample.prompt, response=sample.response,
        context=sample.context, reference=sample.reference, request_id=sample.request_id,
        output_tokens=sample.output_tokens,
    )
