"""Failure is a metric: each collector run is timed, its error caught and recorded.

One `CollectorHealth` per (collector, target); the exporter turns them into
inference_monitor_collector_success / _duration_seconds / last_success_timestamp_seconds.
"Not present" (no NVML on this host) is a state of its own, not a failure.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger("monitor.health")


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

    def as_dict(self) -> dict[str, object]:
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


@dataclass
class HealthBook:
    wall: Callable[[], float] = time.time
    clock: Callable[[], float] = time.perf_counter
    entries: dict[tuple[str, str], CollectorHealth] = field(default_factory=dict)
    # Called as listener(entry, "down" | "up") when a collector starts or stops failing.
    listeners: list[Callable[[CollectorHealth, str], None]] = field(default_factory=list)

    def get(self, collector: str, target: str = "") -> CollectorHealth:
        key = (collector, target)
        if key not in self.entries:
            self.entries[key] = CollectorHealth(collector, target)
        return self.entries[key]

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
    text = str(exc).split("\n", 1)[0][:300]
    if getattr(exc, "plain", False):  # errors that already read as a reason ("timed out after 2s")
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
