"""The cyclic garbage collector's walks, kept to what the worker thread's current job makes.

A collection of the oldest generation walks every tracked object that is not frozen, and holds
the interpreter meanwhile: the loop (`/healthz`) and the scrapes wait. What the monitor keeps is
freed by reference counting (a target's snapshot, its derived numbers and its lines of /metrics are
each replaced whole at its next scrape), so those walks find almost nothing. Under `infermon
serve` each job of the worker thread (a target's parse and derivation, a publish, the rules) ends
by freezing what is alive (`gc.freeze()`: a splice of lists, O(1)); the automatic collections walk
what one job made, and cycles that die within it are collected as before.

A cycle that turns into garbage after it was frozen is not collected until the next full
collection here: every `full_every` seconds everything is unfrozen, collected and frozen again.
The measurements that led here are in docs/performance.md ("The garbage collector").
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypedDict, TypeVar

log = logging.getLogger("monitor.heap")
FULL_EVERY_SECONDS = 600.0
P = ParamSpec("P")
T = TypeVar("T")


class HeapStatus(TypedDict):
    frozen_at_last_full_collection: int
    frozen_after_jobs: int
    full_every_seconds: float
    full_collections: int
    last_full_collection_seconds: float
    last_full_collection_unreachable: int


class HeapFreezer:
    """`tick()` after each job of the worker thread, between `start()` and `stop()` (`infermon serve`)."""

    def __init__(self, full_every: float = FULL_EVERY_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.full_every = full_every
        self.clock = clock
        self.last_full = clock()  # when everything was last collected (or frozen, at `start`)
        self.full_collections = 0
        self.full_seconds = 0.0  # how long the last one held the interpreter
        self.collected = 0  # the unreachable objects it found
        self.active = False
        self.ticks = 0  # jobs that ended with a freeze
        # Counted when everything was last frozen (start, a full collection): counting walks every
        # frozen object, holding the interpreter (docs/performance.md), so never per status.
        self.frozen_at_full = 0
        self._full = threading.Lock()

    def start(self) -> None:
        """What lives for the process (modules, the app) out of the walks, and ticks from now on."""
        self.active = True
        self.last_full = self.clock()  # what was made before start was collected as it came
        gc.freeze()
        self.frozen_at_full = gc.get_freeze_count()

    def stop(self) -> None:
        self.active = False
        gc.unfreeze()

    def tick(self) -> None:
        """After a job: from the worker thread, and from the loop after a parse worker's answer."""
        if not self.active:
            return
        self.ticks += 1
        now = self.clock()
        if now - self.last_full >= self.full_every and self._full.acquire(blocking=False):
            try:  # one thread collects; another that comes meanwhile just freezes
                started = time.perf_counter()
                gc.unfreeze()
                self.collected = gc.collect()
                gc.freeze()
                self.frozen_at_full = gc.get_freeze_count()
                self.full_seconds = time.perf_counter() - started
                self.full_collections += 1
                self.last_full = now
            finally:
                self._full.release()
            log.debug("full garbage collection: %d unreachable object(s) in %.3f s", self.collected,
                      self.full_seconds)
            return
        gc.freeze()

    def status(self) -> HeapStatus:
        return {"frozen_at_last_full_collection": self.frozen_at_full, "frozen_after_jobs": self.ticks,
                "full_every_seconds": self.full_every,
                "full_collections": self.full_collections,
                "last_full_collection_seconds": round(self.full_seconds, 6),
                "last_full_collection_unreachable": self.collected}


class AfterEachJob(ThreadPoolExecutor):
    """A pool whose every job ends with `after()`, in the job's thread (the worker's freeze)."""

    def __init__(self, after: Callable[[], None], max_workers: int, thread_name_prefix: str) -> None:
        super().__init__(max_workers, thread_name_prefix=thread_name_prefix)
        self._after = after

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return super().submit(self._then_after, fn, *args, **kwargs)

    def _then_after(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            self._after()
