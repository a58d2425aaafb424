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
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlparse

from monitor.config import QualitySettings
from monitor.quality.calibration import GoldItem, GoldSetError, GoldVerdict, agreement, expected, gold_set, is_gold
from monitor.quality.calibration import uncalibrated as uncalibrated_reason
from monitor.quality.checks import Judged, estimate_tokens, refusal_keyword, summarise
from monitor.quality.drift import JudgeIdentity, endpoint_model, judge_changed
from monitor.quality.judge import RUBRIC_VERSION, TEMPLATE_SHA256, Judge, JudgeInput
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
    calibration: str = ""  # how the judge did on the known answers, in words
    judge_changed: str | None = None
    priced: bool = True

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
        self.identity: JudgeIdentity | None = None  # learnt once the judge is first called
        self._gold: list[GoldItem] | None = None

    def gold(self) -> list[GoldItem]:
        """The known answers judged in every run (read once per runner)."""
        if self._gold is None:
            try:
                self._gold = gold_set(self.settings.judge)
            except GoldSetError as exc:
                raise QualityRunError(f"quality.judge.calibration: {exc}") from None
        return self._gold

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
            rows = [_judgment_row(s) for s in chosen] + [_gold_row(item, self.wall()) for item in self.gold()]
            # Blind: the known answers are judged in the same order as the samples, among them.
            random.Random(f"{day}/{model}").shuffle(rows)
            run_id = self.store.create_run(day, model, self.wall(), len({s.key for s in samples}), rows)
            outcome = ModelOutcome(day, model, "judged", len({s.key for s in samples}), len(chosen))
            if len(chosen) < self.settings.sample_size:
                outcome.note = f"only {len(chosen)} responses on this day (sample_size {self.settings.sample_size})"
                log.info("quality %s %s: %s", day, model, outcome.note)
        else:
            run_id = existing.id
            outcome = ModelOutcome(day, model, "resumed", existing.available)
        pending = self.store.pending(run_id)
        if pending:
            judge = judge or await self._new_judge()
            await self._judge_all(judge, model, pending, progress)
        self._finish(run_id, day, model, outcome, judge)
        await self._write_back(day, model, run_id)
        return outcome, judge

    async def rejudge(self, day: str, models: Sequence[str] | None = None,
                      progress: Progress | None = None) -> RunReport:
        """Today's judge on a past day's stored samples (and today's known answers): the day's runs
        judged again from what the store kept, so a baseline day compares like for like with today
        after the judge changed. The request log may have pruned the day's samples; the run has not."""
        report = RunReport(day)
        judge: Judge | None = None
        try:
            for run in self.store.runs_on(day):
                if models is not None and run.model not in models:
                    continue
                gold = [_gold_row(item, self.wall()) for item in self.gold()]
                self.store.reset_run(run.id, gold, self.wall())
                outcome = ModelOutcome(day, run.model, "rejudged", run.available)
                judge = judge or await self._new_judge()
                await self._judge_all(judge, run.model, self.store.pending(run.id), progress)
                self._finish(run.id, day, run.model, outcome, judge)
                report.outcomes.append(outcome)
        finally:
            if judge is not None:
                report.judge_calls, report.judge_usage_capped = judge.calls, judge.usage_capped
                await judge.aclose()
        return report

    async def _new_judge(self) -> Judge:
        judge = self.judge_factory()
        listed = await judge.endpoint_models()
        self.identity = JudgeIdentity(self.settings.judge.model, endpoint_model(judge.settings.model, listed),
                                      None, None, TEMPLATE_SHA256, RUBRIC_VERSION)
        return judge

    async def _judge_all(self, judge: Judge, model: str, pending: list[QualityJudgment],
                         progress: Progress | None) -> None:
        # Blind: the known answers go to the judge in an order drawn anew, among the samples (a
        # resumed or re-judged run too, whose pending rows are in the order they were stored).
        pending = list(pending)
        random.Random(f"{model}/{len(pending)}/{self.wall()}").shuffle(pending)
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

    def _finish(self, run_id: int, day: str, model: str, outcome: ModelOutcome, judge: Judge | None) -> None:
        every = self.store.judgments(run_id)
        rows = [r for r in every if not is_gold(r.sample_key)]
        gold = [r for r in every if is_gold(r.sample_key)]
        judged = [Judged.of(r) for r in rows]
        found = agreement([GoldVerdict(*expected(r.sample_key), r.score if r.error is None else None, r.refusal,
                                       r.hallucination) for r in gold])
        withheld = uncalibrated_reason(found, self.settings.judge)
        days = baseline_dates(day, self.settings.baseline_days)
        stored = [(run.date, QualitySummary.from_stored(run.summary)) for run in self.store.done_runs(model, days)]
        base_runs = [base for _, base in stored]
        covered = {date for date, base in stored if base.sampled}
        # A baseline exists only when its days are covered (as the service's): 1 day is no 7-day baseline.
        ready = len(covered) >= math.ceil(self.settings.baseline_min_coverage * len(days) - 1e-9)
        base_days = days if ready else []
        summary = summarise(judged, self.store.baseline_lengths(model, base_days), self._baseline(model, base_days),
                            outcome.available, self.settings.sample_size, withheld)
        gold_cost = sum(r.cost_usd for r in gold)
        summary = replace(
            summary, baseline_days_covered=len(covered), baseline_days=len(days),
            baseline="ready" if ready else f"baseline warming up: {len(covered)} of {len(days)} days",
            note=outcome.note or None, judge_priced=self._priced(),
            judge_cost_usd=(summary.judge_cost_usd or 0.0) + gold_cost,  # the judge's spend, known answers too
            calibration_items=found.items, calibration_answered=found.answered,
            calibration_exact_ratio=found.exact_ratio, calibration_within_one_ratio=found.within_one_ratio,
            calibration_kappa=found.kappa, calibration_refusal_agreement=found.refusal_agreement,
            calibration_hallucination_agreement=found.hallucination_agreement, calibration_bias=found.bias,
            **self._identity(judge).fields())
        changed = judge_changed(summary, base_runs) if ready and not summary.failed else None
        if changed:  # today's score through another judge: no delta against the baseline's
            summary = replace(summary, judge_changed=changed, score_baseline_delta=None)
        self.store.finish_run(run_id, summary.to_json(), self.wall())
        outcome.sampled = len(rows)
        outcome.judged_now = sum(1 for r in rows if r.judged_at is not None)
        outcome.judge_errors = summary.judge_errors or 0
        outcome.suspect_verdicts = summary.suspect_verdicts or 0
        outcome.failed = summary.failed
        outcome.cost_usd = summary.judge_cost_usd or 0.0
        outcome.priced = self._priced()
        outcome.judge_changed = summary.judge_changed
        outcome.calibration = calibration_text(summary)
        if outcome.failed:
            log.warning("quality %s %s: the run failed: %s (no score)", day, model, outcome.failed)

    def _priced(self) -> bool:
        judge = self.settings.judge
        return judge.usd_per_million_input_tokens > 0 or judge.usd_per_million_output_tokens > 0

    def _identity(self, judge: Judge | None) -> JudgeIdentity:
        """What judged the run: the configured judge, what /v1/models said and what most answers said."""
        base = self.identity or JudgeIdentity(self.settings.judge.model, None, None, None, TEMPLATE_SHA256,
                                              RUBRIC_VERSION)
        if judge is None or not judge.answered_by:
            return base
        (response_model, fingerprint), _ = judge.answered_by.most_common(1)[0]
        return replace(base, response_model=response_model, fingerprint=fingerprint)

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


def calibration_text(summary: QualitySummary) -> str:
    """`judge agreement on 42 known answers: κ 0.93, exact 81 %, within 1 100 %` (empty: none judged)."""
    if not summary.calibration_items:
        return ""
    if summary.uncalibrated:
        return str(summary.uncalibrated)
    if not summary.calibration_answered:
        return f"no verdict on the {summary.calibration_items} known answers"
    kappa = "undefined" if summary.calibration_kappa is None else f"{summary.calibration_kappa:.2f}"
    exact, within = summary.calibration_exact_ratio or 0.0, summary.calibration_within_one_ratio or 0.0
    return (f"judge agreement on {summary.calibration_answered} known answers: κ {kappa}, exact "
            f"{exact * 100:.0f} %, within 1 {within * 100:.0f} %")


def _gold_row(item: GoldItem, now: float) -> dict[str, Any]:
    """A known answer as a pending judgment: what the judge sees is a sample's (prompt, response)."""
    return {
        "sample_key": item.key, "ts": now, "prompt": item.prompt, "response": item.response, "context": None,
        "reference": None, "request_id": None, "trace_id": None, "observation_id": None,
        "length_tokens": estimate_tokens(item.response), "length_estimated": True,
        "refusal_keyword": refusal_keyword(item.response),
    }


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
