"""Failure is a metric: each collector run is timed, its error caught and recorded.

One `CollectorHealth` per (collector, target); the exporter turns them into
inference_monitor_collector_success / _duration_seconds / last_success_timestamp_seconds.
"Not present" (no NVML on this host) is a state of its own, not a failure.

One `JobProgress` per scheduled job: each step of a job (a scheduled run, one tick of a loop) is
run under `HealthBook.step`, which catches what escapes it, so no exception ends a job. A job
that stopped, or whose last good step is older than a few intervals, is what /healthz reports.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypedDict

from monitor.redaction import redact_urls

log = logging.getLogger("monitor.health")


class CollectorStatus(TypedDict):
    """One collector (and target) in /api/v1/status' "collectors"."""

    collector: str
    target: str | None
    present: bool
    success: bool | None  # None until the first run ends
    duration_seconds: float | None
    last_run: float | None
    last_success: float | None
    error: str | None
    runs: int
    failures: int


class JobStatus(TypedDict):
    """One job in /api/v1/status' "jobs"."""

    job: str
    interval_seconds: float | None
    last_progress: float | None
    failing: bool
    last_error: str | None
    last_error_at: float | None
    errors: int
    problem: str | None  # why /healthz fails for it


@dataclass
class CollectorHealth:
    collector: str
    target: str = ""
    present: bool = True
    success: bool | None = None  # None until the first run ends
    duration_seconds: float | None = None
    last_success: float | None = None  # wall-clock seconds
    last_run: float | None = None
    error: str | None = None
    runs: int = 0
    failures: int = 0

    def as_dict(self) -> CollectorStatus:
        return {
            "collector": self.collector,
            "target": self.target or None,
            "present": self.present,
            "success": self.success,
            "duration_seconds": self.duration_seconds,
            "last_run": self.last_run,
            "last_success": self.last_success,
            "error": self.error,
            "runs": self.runs,
            "failures": self.failures,
        }


# A job is stuck when its last good step is older than this many intervals (and this floor).
STALE_INTERVALS = 3
STALE_FLOOR_SECONDS = 120.0  # a slow run (sends, NVML timeouts) is not a stuck one


@dataclass
class JobProgress:
    job: str
    since: float  # when it was watched: the clock for a job that never finished a step
    interval_seconds: float | None = None  # None: not judged (a job run by hand, a cron job)
    last_progress: float | None = None  # wall-clock end of the last step that did not fail
    last_error: str | None = None  # why a step last failed (kept after good steps: says why it had trouble)
    last_error_at: float | None = None
    failing: bool = False  # the last step failed
    errors: int = 0
    skipped: int = 0  # runs the scheduler skipped because the previous one still ran (max_instances=1)
    stopped: str | None = None  # why the job ended, if it did

    def stale_after(self) -> float:
        return max(STALE_INTERVALS * (self.interval_seconds or 0.0), STALE_FLOOR_SECONDS)

    def problem(self, now: float) -> str | None:
        """Why this job is unhealthy, or None."""
        if self.stopped is not None:
            return f"stopped: {self.stopped}"
        if self.interval_seconds is None:
            return None
        quiet = now - (self.last_progress if self.last_progress is not None else self.since)
        if quiet <= self.stale_after():
            return None
        why = f"; last error: {self.last_error}" if self.failing else ""
        return f"no progress for {quiet:.0f}s (expected every {self.interval_seconds:g}s){why}"

    def as_dict(self, now: float) -> JobStatus:
        return {"job": self.job, "interval_seconds": self.interval_seconds, "last_progress": self.last_progress,
                "failing": self.failing, "last_error": self.last_error, "last_error_at": self.last_error_at,
                "errors": self.errors, "problem": self.problem(now)}


@dataclass
class HealthBook:
    wall: Callable[[], float] = time.time
    clock: Callable[[], float] = time.perf_counter
    entries: dict[tuple[str, str], CollectorHealth] = field(default_factory=dict)
    # Called as listener(entry, "down" | "up") when a collector starts or stops failing.
    listeners: list[Callable[[CollectorHealth, str], None]] = field(default_factory=list)
    jobs: dict[str, JobProgress] = field(default_factory=dict)

    def get(self, collector: str, target: str = "") -> CollectorHealth:
        key = (collector, target)
        if key not in self.entries:
            self.entries[key] = CollectorHealth(collector, target)
        return self.entries[key]

    def job(self, name: str) -> JobProgress:
        if name not in self.jobs:
            self.jobs[name] = JobProgress(name, since=self.wall())
        return self.jobs[name]

    def watch(self, name: str, interval_seconds: float) -> None:
        """Judge this job's progress from now on (the app does, for every job it schedules)."""
        progress = self.job(name)
        progress.since, progress.interval_seconds, progress.stopped = self.wall(), interval_seconds, None

    def stopped(self, name: str, why: str) -> None:
        self.job(name).stopped = why

    def problems(self) -> dict[str, str]:
        """job -> why it is unhealthy, for /healthz; empty while every job makes progress."""
        now = self.wall()
        return {name: why for name, progress in list(self.jobs.items()) if (why := progress.problem(now))}

    @contextmanager
    def step(self, job: str) -> Iterator[None]:
        """One step of a job: an exception is logged and counted, and ends the step, never the job."""
        progress = self.job(job)
        try:
            yield
        except Exception as exc:
            error = _describe(exc)
            if progress.failing and error == progress.last_error:  # a traceback when it starts or changes
                log.debug("job %s: a step failed again: %s", job, error)
            else:
                log.exception("job %s: a step failed (the job goes on): %s", job, error)
            progress.failing, progress.last_error, progress.last_error_at = True, error, self.wall()
            progress.errors += 1
        else:
            progress.failing = False
            progress.last_progress = self.wall()

    def forget(self, collector: str, target: str) -> None:
        self.entries.pop((collector, target), None)

    @contextmanager
    def run(self, collector: str, target: str = "") -> Iterator[CollectorHealth]:
        """Time a collector run; an exception marks it failed, is logged, and goes no further."""
        entry = self.get(collector, target)
        started = self.clock()
        entry.present = True
        try:
            yield entry
        except Exception as exc:  # a collector's failure must never reach the scheduler
            error = _describe(exc)
            # Log a failure when it starts or changes, not on every tick of a long outage.
            level = logging.DEBUG if entry.success is False and entry.error == error else logging.WARNING
            self._finish(entry, started, ok=False, error=error)
            log.log(level, "collector %s%s failed: %s", collector, f"[{target}]" if target else "", error)
        else:
            if entry.present:
                self._finish(entry, started, ok=True, error=None)
            else:
                self._finish(entry, started, ok=None, error=None)

    def _finish(self, entry: CollectorHealth, started: float, ok: bool | None, error: str | None) -> None:
        previous = entry.success
        entry.duration_seconds = self.clock() - started
        entry.last_run = self.wall()
        entry.success = ok
        entry.error = error
        entry.runs += 1
        if ok:
            entry.last_success = entry.last_run
        elif ok is False:
            entry.failures += 1
        if (ok is False and previous is not False) or (ok and previous is False):
            self._notify(entry, "down" if ok is False else "up")

    def _notify(self, entry: CollectorHealth, state: str) -> None:
        for listener in self.listeners:
            try:
                listener(entry, state)
            except Exception:  # a broken history store must not break collection
                log.exception("recording %s %s of %s failed", entry.collector, state, entry.target)


def _describe(exc: Exception) -> str:
    text = redact_urls(str(exc).split("\n", 1)[0][:300])  # an HTTP error names its URL, token and all
    if getattr(exc, "plain", False):  # errors that already read as a reason ("timed out after 2s")
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
