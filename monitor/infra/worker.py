"""Blocking calls off the event loop, under a deadline, never more than one in flight.

NVML calls can block forever when the driver is wedged. Each GPU gets one daemon thread
that runs one job at a time: a job that overruns its deadline fails the tick, and while it
is still stuck the next ticks fail at once instead of starting another thread behind it —
so a hung GPU costs one thread, forever at most, and never the event loop. Daemon threads,
because a thread stuck in the driver must not keep the process from exiting.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class WorkerBusy(Exception):
    """The previous call on this worker has not returned yet."""

    plain = True


class CallTimeout(Exception):
    plain = True


_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class Inbox:
    """Outcomes from worker threads, handed to their event loop in as few wake-ups as possible.

    Each wake-up of the loop from a thread (call_soon_threadsafe: a pipe write, an epoll
    return, a callback) has a cost of its own; 64 GPUs finishing together should cost one, not 64.
    The first outcome to arrive schedules a drain; those arriving before it runs ride along.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], tuple[bool, Any]]]] = {}

    def post(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
        with self._lock:
            waiting = self._waiting.setdefault(loop, [])
            first = not waiting
            waiting.append((future, outcome))
        if first:
            try:
                loop.call_soon_threadsafe(self._drain, loop)
            except RuntimeError:  # the loop closed while we were blocked: nobody is waiting
                with self._lock:
                    self._waiting.pop(loop, None)

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            waiting = self._waiting.pop(loop, [])
        for future, outcome in waiting:
            _settle(future, outcome)


class DeviceWorker:
    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic, inbox: Inbox | None = None) -> None:
        self.name = name
        self.clock = clock
        self.inbox = inbox or Inbox()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._busy_since: float | None = None
        self._thread: threading.Thread | None = None  # started on the first call
        self.last_duration: float | None = None  # seconds the last call took (the deadline if it overran)

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def busy_for(self) -> float | None:
        """Seconds the current call has been running; None when idle."""
        since = self._busy_since
        return None if since is None else self.clock() - since

    def submit(self, fn: Callable[[], T], timeout_s: float) -> asyncio.Future[T]:
        """Start `fn` on this worker's thread; the future fails with CallTimeout at the deadline.

        A plain future rather than a coroutine, so a tick over 64 GPUs awaits 64 futures
        instead of scheduling 64 tasks; and one timer per call rather than wait_for(shield()).
        """
        if self._busy_since is not None:
            # The same words every tick, so a long outage is logged once (see HealthBook.run).
            raise WorkerBusy("previous call still blocked")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        self._busy_since = self.clock()
        self._jobs.put((fn, loop, future))
        # The deadline settles the future first; the thread's late outcome is then dropped
        # (a thread blocked in the driver cannot be interrupted, only abandoned).
        deadline = loop.call_later(timeout_s, self._expire, future, timeout_s)
        future.add_done_callback(lambda _: deadline.cancel())
        return future

    async def call(self, fn: Callable[[], T], timeout_s: float) -> T:
        return await self.submit(fn, timeout_s)

    def _expire(self, future: asyncio.Future[Any], timeout_s: float) -> None:
        if not future.done():
            self.last_duration = timeout_s
            future.set_exception(CallTimeout(f"timed out after {timeout_s:g}s"))

    def close(self) -> None:
        """Ask the thread to stop after its current job; a stuck thread stays a daemon."""
        if self._thread is not None:
            self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, loop, future = job
            started = time.perf_counter()
            try:
                outcome: tuple[bool, Any] = (True, fn())
            except BaseException as exc:  # delivered to the awaiting coroutine, not lost here
                outcome = (False, exc)
            self.last_duration = time.perf_counter() - started
            self._busy_since = None
            self.inbox.post(loop, future, outcome)


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
