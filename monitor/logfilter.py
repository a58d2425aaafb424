"""One log line per burst: the same message again within a window is counted, not written.

    2026-12-01 10:00:00 WARNING uvicorn.error: Exceeded concurrency limit.
    (the next 20,000 identical lines within 10 s: counted)
    2026-12-01 10:00:12 WARNING uvicorn.error: Exceeded concurrency limit. (repeated 20000 times in the last 12 s)

A flood (descriptors exhausted, a target down with 1,000 replicas) once wrote 217k identical
lines in 70 s; this keeps the first, and the count when the message comes back after the window.
A flood that stops is not left uncounted: `flush()` (every window, on a thread `install` starts)
writes the count of each message held back whose window has passed:

    2026-12-01 10:00:10 WARNING uvicorn.error: Exceeded concurrency limit. (repeated 20000 times
    in the last 10 s, then no more)
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable

MAX_KEYS = 4096  # distinct messages remembered; older ones are forgotten first


class RepeatFilter(logging.Filter):
    def __init__(self, window_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window = window_seconds
        self.clock = clock
        # key -> (first shown at, suppressed since, the last record held back)
        self.seen: dict[tuple[str, int, str], tuple[float, int, logging.LogRecord | None]] = {}
        self.lock = threading.Lock()  # filter() runs on the logging threads, flush() on its own

    def filter(self, record: logging.LogRecord) -> bool:
        if self.window <= 0:
            return True
        key = (record.name, record.levelno, record.getMessage())
        with self.lock:
            now = self.clock()
            shown = self.seen.get(key)
            if shown is not None and now - shown[0] < self.window:
                self.seen[key] = (shown[0], shown[1] + 1, record)
                return False
            if shown is not None and shown[1]:
                record.msg = f"{record.getMessage()} (repeated {shown[1]} times in the last {now - shown[0]:.0f} s)"
                record.args = None
            self.seen.pop(key, None)
            self.seen[key] = (now, 0, None)
            if len(self.seen) > MAX_KEYS:
                del self.seen[next(iter(self.seen))]
            return True

    def flush(self) -> int:
        """Write the count of every message held back whose window has passed; how many were written."""
        due = []
        with self.lock:
            now = self.clock()
            for key, (first, count, held) in list(self.seen.items()):
                if count and held is not None and now - first >= self.window:
                    del self.seen[key]  # the count is said now; the next one is shown again
                    line = copy.copy(held)
                    line.msg = (f"{held.getMessage()} (repeated {count} times in the last {now - first:.0f} s, "
                                "then no more)")
                    line.args = None
                    due.append(line)
        for line in due:  # outside the lock: the line passes this filter again on its way out
            logging.getLogger(line.name).handle(line)
        return len(due)


def install(window_seconds: float, loggers: tuple[str, ...] = ("", "uvicorn", "uvicorn.error")) -> RepeatFilter:
    """One filter on every handler of these loggers (handlers see what propagates to them)."""
    repeat = RepeatFilter(window_seconds)
    for name in loggers:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RepeatFilter) for f in handler.filters):
                handler.addFilter(repeat)
    if window_seconds > 0:
        def flushing() -> None:
            while not stop.wait(window_seconds):
                repeat.flush()

        stop = threading.Event()
        threading.Thread(target=flushing, name="infermon-log-repeats", daemon=True).start()
    return repeat
