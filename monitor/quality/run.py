"""A quality run: for one date, per model, sample → redact → judge → check → store.

Idempotent per (date, model): a finished run is not judged again unless forced. Resumable: the
sampled responses are stored as pending judgments before the first judge call and each verdict
is committed when it arrives, so after a crash (kill -9 included) the next run judges only the
pending ones.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlparse

from monitor.config import QualitySettings
from monitor.quality.checks import Judged, estimate_tokens, refusal_keyword, summarise
from monitor.quality.judge import Judge, JudgeInput
from monitor.quality.redact import Redactor
from monitor.quality.sample import Sample
from monitor.quality.sampling import baseline_dates, day_window, draw
from monitor.quality.sources import SampleSource
from monitor.quality.sources.langfuse import LangfuseSource, ScoreWrite
from monitor.quality.store import QualityJudgment, QualityStore
from monitor.quality.summary import QualitySummary

log = logging.getLogger("monitor.quality.run")

# progress(model, done, total): called once with done=0 when a model's judging starts, then per verdict.
Progress = Callable[[str, int, int], None]


class QualityRunError(Exception):
    plain = True


@dataclass
class ModelOutcome:
    date: str
    model: str
    status: str  # judged | resumed | skipped (already done) | empty
    available: int = 0
    sampled: int = 0
    judged_now: int = 0
    judge_errors: int = 0
    suspect_verdicts: int = 0
    cost_usd: float = 0.0
    note: str = ""
    failed: str | None = None  # why the run failed (the judge did), None when it did not

    @property
    def ok(self) -> bool:
        return self.failed is None


@dataclass
class RunReport:
    date: str
    outcomes: list[ModelOutcome] = field(default_factory=list)
    source_errors: dict[str, str] = field(default_factory=dict)
    judge_calls: int = 0
    judge_usage_capped: int = 0  # answers whose reported usage was capped or ignored in the cost


class QualityRunner:
    def __init__(self, settings: QualitySettings, store: QualityStore, sources: Sequence[SampleSource],
                 judge_factory: Callable[[], Judge] | None = None, wall: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.sources = list(sources)
        self.judge_factory = judge_factory or (lambda: default_judge(settings))
        self.redact = Redactor(settings.redact)
        self.wall = wall

    async def run(self, day: str, models: Sequence[str] | None = None, force: bool = False,
                  progress: Progress | None = None) -> RunReport:
        report = RunReport(day)
        by_model = await self._collect(day, report)
        wanted = sorted(set(by_model) | self._unfinished(day)) if models is None else sorted(models)
        judge: Judge | None = None
        try:
            for model in wanted:
                outcome, judge = await self._run_model(day, model, by_model.get(model, []), force, judge, progress)
                report.outcomes.append(outcome)
        finally:
            if judge is not None:
                report.judge_calls, report.judge_usage_capped = judge.calls, judge.usage_capped
                await judge.aclose()
            for source in self.sources:  # a runner is built per run: its HTTP clients end with it
                if isinstance(source, LangfuseSource):
                    await source.aclose()
        return report

    async def _collect(self, day: str, report: RunReport) -> dict[str, list[Sample]]:
        start, end = day_window(day, self.settings.timezone)
        by_model: dict[str, list[Sample]] = defaultdict(list)
        for source in self.sources:
            try:
                found = await source.samples(start, end)
            except Exception as exc:  # one broken source never empties the others
                report.source_errors[source.name] = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("quality source %s failed: %s", source.name, report.source_errors[source.name])
                continue
            for sample in found:
                by_model[sample.model].append(sample.redacted(self.redact))
        return by_model

    def _unfinished(self, day: str) -> set[str]:
        return {run.model for run in self.store.runs_on(day) if run.status != "done"}

    async def _run_model(self, day: str, model: str, samples: list[Sample], force: bool, judge: Judge | None,
                         progress: Progress | None) -> tuple[ModelOutcome, Judge | None]:
        existing = self.store.run(day, model)
        if existing is not None and existing.status == "done" and not force:
            note = "already done (--force judges again)"
            failed = QualitySummary.from_stored(existing.summary).failed  # a failed run stays failed until judged again
            return ModelOutcome(day, model, "skipped", existing.available, note=note, failed=failed), judge
        if existing is not None and force:
            self.store.delete_run(existing.id)
            existing = None
        if existing is None:
            if not samples:
                return ModelOutcome(day, model, "empty", note="no responses on this day"), judge
            chosen = draw(samples, self.settings.sample_size, day, model)
            run_id = self.store.create_run(day, model, self.wall(), len({s.key for s in samples}),
                                           [_judgment_row(s) for s in chosen])
            outcome = ModelOutcome(day, model, "judged", len({s.key for s in samples}), len(chosen))
            if len(chosen) < self.settings.sample_size:
                outcome.note = f"only {len(chosen)} responses on this day (sample_size {self.settings.sample_size})"
                log.info("quality %s %s: %s", day, model, outcome.note)
        else:
            run_id = existing.id
            outcome = ModelOutcome(day, model, "resumed", existing.available)
        pending = self.store.pending(run_id)
        if pending:
            judge = judge or self.judge_factory()
            await self._judge_all(judge, model, pending, progress)
        self._finish(run_id, day, model, outcome)
        await self._write_back(day, model, run_id)
        return outcome, judge

    async def _judge_all(self, judge: Judge, model: str, pending: list[QualityJudgment],
                         progress: Progress | None) -> None:
        limit = asyncio.Semaphore(self.settings.judge.concurrency)
        # One writer thread: the verdicts' commits queue there instead of racing each other for the
        # SQLite file from the default executor's threads (several at once crashed the process).
        writer = ThreadPoolExecutor(1, thread_name_prefix="infermon-verdicts")
        loop = asyncio.get_running_loop()
        done = 0
        if progress:
            progress(model, 0, len(pending))

        async def one(row: QualityJudgment) -> None:
            nonlocal done
            async with limit:
                try:
                    verdict = await judge.judge(JudgeInput(row.prompt, row.response, row.context, row.reference))
                except Exception as exc:  # a judge answer nobody foresaw: this sample's error, not the run's end
                    verdict = judge.failed(f"judge failed: {type(exc).__name__}: {judge.scrub(str(exc))[:200]}")
                    log.warning("quality %s: judging %s failed: %s", model, row.sample_key, verdict.error)
            # Committed at once (that is what makes a killed run resumable), off the loop: an fsync
            # per verdict would otherwise hold back the next judge call. An in-memory store (no
            # fsync) is one connection the loop uses too: written here, on the loop's thread.
            if self.store.one_connection:
                self.store.save_verdict(row.id, verdict, self.wall())
            else:
                await loop.run_in_executor(writer, self.store.save_verdict, row.id, verdict, self.wall())
            if verdict.error:
                log.info("quality %s: judge error on %s: %s", model, row.sample_key, verdict.error)
            done += 1
            if progress:
                progress(model, done, len(pending))

        tasks = [asyncio.ensure_future(one(row)) for row in pending]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            # One failed (a save the store refused): the others end with it, not behind the run's back
            # on a judge client the run is about to close.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            writer.shutdown(wait=False)  # a save still queued runs to its end on that thread

    def _finish(self, run_id: int, day: str, model: str, outcome: ModelOutcome) -> None:
        rows = self.store.judgments(run_id)
        judged = [Judged(r.score, r.refusal, r.refusal_keyword, r.hallucination, r.error, r.length_tokens,
                         r.cost_usd, r.input_tokens, r.judge_output_tokens, r.reason, r.response) for r in rows]
        days = baseline_dates(day, self.settings.baseline_days)
        covered = {run.date for run in self.store.done_runs(model, days)
                   if QualitySummary.from_stored(run.summary).sampled}
        # A baseline exists only when its days are covered (as the service's): 1 day is no 7-day baseline.
        ready = len(covered) >= math.ceil(self.settings.baseline_min_coverage * len(days) - 1e-9)
        base_days = days if ready else []
        summary = summarise(judged, self.store.baseline_lengths(model, base_days), self._baseline(model, base_days),
                            outcome.available, self.settings.sample_size)
        summary = replace(
            summary, baseline_days_covered=len(covered), baseline_days=len(days),
            baseline="ready" if ready else f"baseline warming up: {len(covered)} of {len(days)} days",
            note=outcome.note or None)
        self.store.finish_run(run_id, summary.to_json(), self.wall())
        outcome.sampled = len(rows)
        outcome.judged_now = sum(1 for r in rows if r.judged_at is not None)
        outcome.judge_errors = summary.judge_errors or 0
        outcome.suspect_verdicts = summary.suspect_verdicts or 0
        outcome.failed = summary.failed
        outcome.cost_usd = summary.judge_cost_usd or 0.0
        if outcome.failed:
            log.warning("quality %s %s: the run failed: %s (no score)", day, model, outcome.failed)

    def _baseline(self, model: str, days: list[str]) -> dict[str, float | None]:
        """Score mean and refusal ratio over the baseline days' runs, weighted by their samples."""
        totals: dict[str, list[float]] = {"score_mean": [0.0, 0.0], "refusal_ratio": [0.0, 0.0]}
        for run in self.store.done_runs(model, days):
            summary = QualitySummary.from_stored(run.summary)
            # each number weighted by what it counts: scored samples, sampled responses
            numbers = {"score_mean": (summary.score_mean, summary.samples or 0),
                       "refusal_ratio": (summary.refusal_ratio, summary.sampled or 0)}
            for key, pair in totals.items():
                value, weight = numbers[key]
                if value is not None and weight:
                    pair[0] += value * weight
                    pair[1] += weight
        return {key: (pair[0] / pair[1] if pair[1] else None) for key, pair in totals.items()}

    async def _write_back(self, day: str, model: str, run_id: int) -> None:
        targets = [s for s in self.sources if isinstance(s, LangfuseSource)]
        if not targets or not any(getattr(c, "write_scores", False) for c in self.settings.sources
                                  if c.type == "langfuse"):
            return
        scores = scores_for(day, self.store.judgments(run_id))
        for source in targets:
            try:
                await source.write_scores(scores)
            except Exception as exc:
                log.warning("quality %s %s: writing scores to langfuse failed: %s", day, model, exc)


def scores_for(day: str, rows: Sequence[QualityJudgment]) -> list[ScoreWrite]:
    scores: list[ScoreWrite] = []
    for row in rows:
        if row.trace_id is None or row.score is None:
            continue
        ids = (day, row.trace_id, row.observation_id)
        scores.append(ScoreWrite(*ids, "quality_score", float(row.score), "NUMERIC", row.reason))
        scores.append(ScoreWrite(*ids, "refusal", 1.0 if (row.refusal or row.refusal_keyword) else 0.0, "BOOLEAN"))
        scores.append(ScoreWrite(*ids, "hallucination", 1.0 if row.hallucination else 0.0, "BOOLEAN"))
    return scores


def _judgment_row(sample: Sample) -> dict[str, Any]:
    tokens = sample.output_tokens
    return {
        "sample_key": sample.key, "ts": sample.timestamp, "prompt": sample.prompt, "response": sample.response,
        "context": sample.context, "reference": sample.reference, "request_id": sample.request_id,
        "trace_id": sample.trace_id, "observation_id": sample.observation_id,
        "length_tokens": tokens if tokens is not None else estimate_tokens(sample.response),
        "length_estimated": tokens is None, "refusal_keyword": refusal_keyword(sample.response),
    }


def default_judge(settings: QualitySettings) -> Judge:
    """The configured judge; the API key comes from the environment only."""
    key = os.environ.get(settings.judge.api_key_env)
    if not key:
        host = urlparse(settings.judge.base_url).hostname or ""
        if host.endswith("openai.com"):
            raise QualityRunError(f"judge: set the API key in the environment variable {settings.judge.api_key_env}")
        key = "EMPTY"  # local servers (vLLM, Ollama) take any key
    return Judge(settings.judge, key)
