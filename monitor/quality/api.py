"""HTTP: request-log ingestion, the runs as JSON, and the report page."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from monitor.auth import bearer_guard
from monitor.quality.redact import Redactor
from monitor.quality.report import ModelReport, render_report
from monitor.quality.sample import Sample, SampleIn
from monitor.quality.sampling import baseline_dates
from monitor.store.quality import QualityRun

if TYPE_CHECKING:
    from monitor.runtime import Monitor

MAX_SAMPLES_PER_REQUEST = 1000
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def quality_router(monitor: Monitor) -> APIRouter:
    router = APIRouter()
    settings = monitor.settings.quality
    store = monitor.quality.store
    redact = Redactor(settings.redact)

    @router.post("/api/v1/samples", status_code=202, dependencies=[Depends(bearer_guard(monitor.settings.api.token))])
    async def post_samples(request: Request) -> dict[str, int]:
        body = await _read_limited(request, settings.max_body_bytes)
        samples = _parse_samples(body, monitor.wall(), settings.max_text_chars)
        added = store.add_samples(s.redacted(redact) for s in samples)
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

    @router.get("/reports/quality/{date}", response_class=HTMLResponse)
    async def report(date: str) -> HTMLResponse:
        found = [run for run in store.runs_on(_checked(date)) if run.status == "done"]
        if not found:
            raise HTTPException(404, f"no finished quality run on {date}")
        days = baseline_dates(date, settings.baseline_days)
        summaries = {run.id: json.loads(run.summary or "{}") for run in found}
        # The baseline days only where the run had a baseline (its days covered): see run._finish.
        models = [ModelReport(run, summaries[run.id], store.judgments(run.id), store.baseline_lengths(
            run.model, days if summaries[run.id].get("baseline", "ready") == "ready" else [])) for run in found]
        return HTMLResponse(render_report(date, models))

    return router


async def _read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"body larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_samples(body: bytes, now: float, max_chars: int) -> list[Sample]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise HTTPException(400, f"not JSON: {exc}") from None
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
    summary = json.loads(run.summary or "{}")
    out: dict[str, Any] = {"status": run.status, "started": run.started, "finished": run.finished}
    keys = ("samples", "score_mean", "refusal_ratio", "hallucination_ratio", "psi", "ks_pvalue", "judge_errors",
            "judge_cost_usd") if brief else summary.keys()
    out.update({k: summary.get(k) for k in keys})
    return out
