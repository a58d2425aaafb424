"""One log line per burst: the same message again within a window is counted, not written.

    2026-12-01 10:00:00 WARNING uvicorn.error: Exceeded concurrency limit.
    (the next 20,000 identical lines within 10 s: counted)
    2026-12-01 10:00:12 WARNING uvicorn.error: Exceeded concurrency limit. (repeated 20000 times in the last 12 s)

A flood (descriptors exhausted, a target down with 1,000 replicas) once wrote 217k identical
lines in 70 s; this keeps the first, and the count when the message comes back after the window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

MAX_KEYS = 4096  # distinct messages remembered; older ones are forgotten first


class RepeatFilter(logging.Filter):
    def __init__(self, window_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window = window_seconds
        self.clock = clock
        self.seen: dict[tuple[str, int, str], tuple[float, int]] = {}  # key -> (first shown at, suppressed)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.window <= 0:
            return True
        key = (record.name, record.levelno, record.getMessage())
        now = self.clock()
        shown = self.seen.get(key)
        if shown is not None and now - shown[0] < self.window:
            self.seen[key] = (shown[0], shown[1] + 1)
            return False
        if shown is not None and shown[1]:
            record.msg = f"{record.getMessage()} (repeated {shown[1]} times in the last {now - shown[0]:.0f} s)"
            record.args = None
        self.seen.pop(key, None)
        self.seen[key] = (now, 0)
        if len(self.seen) > MAX_KEYS:
            del self.seen[next(iter(self.seen))]
        return True


def install(window_seconds: float, loggers: tuple[str, ...] = ("", "uvicorn", "uvicorn.error")) -> RepeatFilter:
    """One filter on every handler of these loggers (handlers see what propagates to them)."""
    repeat = RepeatFilter(window_seconds)
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RepeatFilter) for f in handler.filters):
                handler.addFilter(repeat)
    return repeat
