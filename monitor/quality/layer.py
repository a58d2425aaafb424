"""The quality layer inside the monitor: the daily run as a cron job, and the view /metrics renders.

The view is re-read from the store every `refresh_interval`, so a run made anywhere (this
process's schedule, `infermon quality run` in another process, another replica) shows within it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from monitor.config import JsonlSource as JsonlConfig
from monitor.config import LangfuseSource as LangfuseConfig
from monitor.config import QualitySettings
from monitor.health import HealthBook
from monitor.quality.run import QualityRunError, QualityRunner, RunReport
from monitor.quality.sampling import previous_day
from monitor.quality.sources import SampleSource
from monitor.quality.sources.jsonl import JsonlSource
from monitor.quality.sources.langfuse import LangfuseSource
from monitor.quality.sources.requestlog import RequestLogSource
from monitor.quality.store import QualityStore
from monitor.quality.summary import QualitySummary
from monitor.redaction import safe_url

log = logging.getLogger("monitor.quality")


@dataclass(frozen=True)
class ModelResult:
    date: str
    finished: float
    summary: QualitySummary


@dataclass
class QualityView:
    latest: dict[str, ModelResult] = field(default_factory=dict)  # per model: its newest finished run
    judge_cost_usd_total: float = 0.0
    loaded: bool = False


def build_sources(settings: QualitySettings, store: QualityStore) -> list[SampleSource]:
    sources: list[SampleSource] = []
    for config in settings.sources:
        if isinstance(config, JsonlConfig):
            sources.append(JsonlSource(config.paths, settings.max_text_chars))
        elif isinstance(config, LangfuseConfig):
            public, secret = os.environ.get(config.public_key_env), os.environ.get(config.secret_key_env)
            if not public or not secret:
                raise QualityRunError(
                    f"langfuse: set {config.public_key_env} and {config.secret_key_env} in the environment")
            sources.append(LangfuseSource(config.host, public, secret, page_size=config.page_size,
                                          timeout_s=config.timeout.seconds))
        else:
            sources.append(RequestLogSource(store))
    return sources


class JudgeStatus(TypedDict):
    base_url: str  # without credentials
    model: str


class RunStatus(TypedDict):
    date: str
    finished: float


class QualityStatus(TypedDict):
    """/api/v1/status' "layers"."quality"."""

    schedule: str | None  # the daily run's cron (None: runs are off)
    timezone: str
    sources: list[str]
    judge: JudgeStatus
    latest: dict[str, RunStatus]  # model -> its newest finished run


class QualityLayer:
    def __init__(self, settings: QualitySettings, store: QualityStore, health: HealthBook,
                 wall: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store
        self.health = health
        self.wall = wall
        self.view = QualityView()
        self.last_report: RunReport | None = None
        # Set by the monitor: its store thread (StoreWorker.call), so reads never wait on the loop.
        self.io: Callable[..., Awaitable[Any]] | None = None
        # One run at a time: the daily job and a forced re-run of the same day (the API, a test)
        # would judge every sample twice at once and delete the judgments the other still updates.
        self._one_run = asyncio.Lock()

    async def _store(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args) if self.io is None else await self.io(fn, *args)

    def runner(self) -> QualityRunner:
        return QualityRunner(self.settings, self.store, build_sources(self.settings, self.store), wall=self.wall)

    async def run(self, day: str | None = None, force: bool = False) -> RunReport | None:
        """One run (default: the previous day in the configured zone), then a fresh view."""
        day = day or previous_day(self.wall(), self.settings.timezone)
        report = None
        async with self._one_run:
            with self.health.run("quality_run"):
                report = await self.runner().run(day, force=force)
                self.last_report = report
                outcomes = ", ".join(f"{o.model} {o.status}" for o in report.outcomes)
                log.info("quality run %s: %s", day, outcomes or "nothing to judge")
        await self.refresh()
        return report

    async def refresh(self) -> None:
        """Re-read the latest runs. A failed read keeps the previous view (and logs why)."""
        try:
            latest: dict[str, ModelResult] = {}
            for run in await self._store(self.store.done_runs):  # newest date first
                if run.model not in latest and run.finished is not None:
                    latest[run.model] = ModelResult(run.date, run.finished, QualitySummary.from_stored(run.summary))
            self.view = QualityView(latest, await self._store(self.store.total_judge_cost), loaded=True)
        except Exception as exc:  # the store being briefly locked must not break the job
            log.warning("quality: reading the latest runs failed: %s", exc)

    async def prune(self) -> None:
        retention = max((c.retention.seconds for c in self.settings.sources if c.type == "requestlog"), default=None)
        if retention is not None:
            await self._store(self.store.prune_samples, self.wall() - retention)

    def status(self) -> QualityStatus:
        return {
            "schedule": self.settings.schedule if self.settings.enabled else None,
            "timezone": self.settings.timezone,
            "sources": [c.type for c in self.settings.sources],
            "judge": {"base_url": safe_url(self.settings.judge.base_url), "model": self.settings.judge.model},
            "latest": {m: {"date": r.date, "finished": r.finished} for m, r in self.view.latest.items()},
        }
