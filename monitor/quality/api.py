"""HTTP: request-log ingestion, the runs as JSON, and the report page."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from monitor.auth import access_guard
from monitor.body import parse_json, read_limited
from monitor.quality.redact import Redactor
from monitor.quality.report import ModelReport, render_index, render_report
from monitor.quality.sample import Sample, SampleIn
from monitor.quality.sampling import baseline_dates
from monitor.quality.store import QualityRun, QualityStore
from monitor.quality.summary import QualitySummary
from monitor.store.worker import STUCK_AFTER, StoreUnavailable, StoreWorker

if TYPE_CHECKING:
    from monitor.config import Settings

log = logging.getLogger("monitor.quality.api")

MAX_SAMPLES_PER_REQUEST = 1000
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def quality_router(settings: Settings, store: QualityStore, store_io: StoreWorker,
                   wall: Callable[[], float]) -> APIRouter:
    """`store_io`: the monitor's store thread, where samples are written off the loop."""
    router = APIRouter()
    quality = settings.quality
    redact = Redactor(quality.redact)

    @router.post("/api/v1/samples", status_code=202, dependencies=[Depends(access_guard(settings))])
    async def post_samples(request: Request) -> Any:
        body = await read_limited(request, quality.max_body_bytes)
        samples = await asyncio.to_thread(_parse_samples, body, wall(), quality.max_text_chars)
        redacted = [s.redacted(redact) for s in samples]
        try:
            added = await store_io.call(store.add_samples, redacted, stuck_after=STUCK_AFTER)
        except (SQLAlchemyError, StoreUnavailable) as exc:  # full disk, locked or read-only: the sender retries
            log.error("samples: cannot store %d sample(s): %s", len(samples), type(exc).__name__)
            return JSONResponse({"error": "cannot store the samples now; retry"}, status_code=503)
        return {"accepted": len(samples), "stored": added, "duplicates": len(samples) - added}

    @router.get("/api/v1/quality/runs")
    async def runs() -> dict[str, Any]:
        by_date: dict[str, dict[str, Any]] = {}
        for run in store.done_runs():
            by_date.setdefault(run.date, {})[run.model] = _run_json(run, brief=True)
        return {"runs": [{"date": d, "models": models} for d, models in by_date.items()]}

    @router.get("/api/v1/quality/runs/{date}")
    async def run_on(date: str) -> dict[str, Any]:
        found = store.runs_on(_checked(date))
        if not found:
            raise HTTPException(404, f"no quality run on {date}")
        models = {run.model: _run_json(run) for run in found}
        for run in found:
            if run.status != "done":  # an interrupted run, or one in progress elsewhere
                models[run.model]["judged"], models[run.model]["sampled"] = store.progress(run.id)
        return {"date": date, "models": models}

    @router.get("/reports/quality", response_class=HTMLResponse)
    @router.get("/reports/quality/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(render_index([(run.date, run.model, QualitySummary.from_stored(run.summary))
                                          for run in store.done_runs()]))

    @router.get("/reports/quality/{date}", response_class=HTMLResponse)
    async def report(date: str) -> HTMLResponse:
        found = [run for run in store.runs_on(_checked(date)) if run.status == "done"]
        if not found:
            raise HTTPException(404, f"no finished quality run on {date}")
        days = baseline_dates(date, quality.baseline_days)
        summaries = {run.id: QualitySummary.from_stored(run.summary) for run in found}
        # The baseline days only where the run had a baseline (its days covered): see run._finish.
        models = [ModelReport(run, summaries[run.id], store.judgments(run.id), store.baseline_lengths(
            run.model, days if summaries[run.id].baseline_ready else [])) for run in found]
        dates = [run.date for run in store.done_runs()]
        return HTMLResponse(render_report(date, models, dates))

    return router


def _parse_samples(body: bytes, now: float, max_chars: int) -> list[Sample]:
    data = parse_json(body)
    items = data if isinstance(data, list) else [data]
    if not items or len(items) > MAX_SAMPLES_PER_REQUEST:
        raise HTTPException(422, f"send 1 to {MAX_SAMPLES_PER_REQUEST} samples per request")
    samples = []
    for index, item in enumerate(items):
        try:
            samples.append(SampleIn.model_validate(item).to_sample(now, max_chars=max_chars))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'sample'}: {e['msg']}" for e in exc.errors())
            raise HTTPException(422, f"sample {index}: {problems}") from None
        except ValueError as exc:
            raise HTTPException(422, f"sample {index}: {exc}") from None
    return samples


def _checked(date: str) -> str:
    if not _DATE.match(date):
        raise HTTPException(400, "date must be YYYY-MM-DD")
    return date


def _run_json(run: QualityRun, brief: bool = False) -> dict[str, Any]:
    summary = QualitySummary.from_stored(run.summary)
    out: dict[str, Any] = {"status": run.status, "started": run.started, "finished": run.finished}
    if not brief:
        out.update(summary.to_json())  # every key the run stored, as stored
        return out
    out.update({"samples": summary.samples, "score_mean": summary.score_mean, "refusal_ratio": summary.refusal_ratio,
                "hallucination_ratio": summary.hallucination_ratio, "psi": summary.psi,
                "ks_pvalue": summary.ks_pvalue, "judge_errors": summary.judge_errors,
                "judge_cost_usd": summary.judge_cost_usd})
    return out
