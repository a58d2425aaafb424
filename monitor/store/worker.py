"""The store's synchronous I/O on a thread of its own, so the event loop never waits on it.

SQLite (or PostgreSQL) calls can block for seconds: a lock another process holds, a full disk,
a 5,000-alert transaction. `StoreWorker.call` runs one on the single store thread (in order,
one at a time, as the code was written for) and awaits it; `submit` queues one without
waiting (history records). The worker also makes the store's health: a failed call marks the
`store` collector failed at once, and `probe` (a job) checks the database answers and, for a
SQLite file, that the file is still there: a deleted file keeps taking writes, into nothing,
then refuses them, so the probe creates it anew and counts that.

An in-memory database (tests) is one connection that threads cannot share safely: there the
calls run inline, on the caller's thread, as before.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from prometheus_client.core import Metric
from sqlalchemy import text
from sqlalchemy.engine import Engine

from monitor.catalog import family
from monitor.health import HealthBook

log = logging.getLogger("monitor.store")

T = TypeVar("T")
COLLECTOR = "store"
STUCK_AFTER = 2.0  # a store call running longer (a lock held elsewhere): an HTTP post is answered 503 at once


class StoreUnavailable(Exception):
    plain = True  # reads as a reason in the health entry


class StoreWorker:
    def __init__(self, engine: Engine, health: HealthBook) -> None:
        self.engine = engine
        self.health = health
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="infermon-store")
        self.last_error: str | None = None  # the last call's failure, until a call succeeds
        self.closed = False
        self.busy_since: float | None = None  # when the call on the store thread now started
        sqlite = engine.url.get_backend_name() == "sqlite"
        database = engine.url.database if sqlite else None
        self.inline = sqlite and database in (None, "", ":memory:")
        self.sqlite_file = os.path.abspath(database) if sqlite and database and not self.inline else None
        self.recreated = 0  # times the SQLite file was found deleted and created again

    async def call(self, fn: Callable[..., T], *args: Any, stuck_after: float | None = None) -> T:
        """`fn(*args)` on the store thread; its exception is raised here (and marks the store failed).
        With `stuck_after`, a store thread busy with one call for longer than that (a lock another
        process holds) refuses at once instead of queueing: an HTTP client gets its 503 now."""
        if self.closed:
            raise StoreUnavailable("the store is closed")
        busy = self.busy_since
        if stuck_after is not None and busy is not None and time.monotonic() - busy > stuck_after:
            raise StoreUnavailable(f"the store has been busy with one call for {time.monotonic() - busy:.0f} s")
        if self.inline:
            return self._guarded(fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self.pool, self._guarded, fn, *args)

    def submit(self, fn: Callable[..., object], *args: Any) -> Future[object] | None:
        """Queue `fn(*args)` without waiting; a failure is logged (and marks the store failed)."""
        if self.inline:
            future: Future[object] = Future()
            try:
                future.set_result(self._guarded(fn, *args))
            except Exception as exc:
                future.set_exception(exc)
            _log_failure(future)
            return future
        try:
            future = self.pool.submit(self._guarded, fn, *args)
        except RuntimeError:  # shut down
            return None
        future.add_done_callback(_log_failure)
        return future

    async def drain(self) -> None:
        """Wait for everything queued so far."""
        await self.call(lambda: None)

    def _guarded(self, fn: Callable[..., T], *args: Any) -> T:
        self.busy_since = time.monotonic()
        try:
            result = fn(*args)
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            self._mark_failed(exc)
            raise
        finally:
            self.busy_since = None
        self.last_error = None
        return result

    def _mark_failed(self, exc: Exception) -> None:
        if self.sqlite_file is not None and not os.path.exists(self.sqlite_file):
            exc = self._gone()  # SQLite says "readonly database": the reason is the missing file
        if self.health.get(COLLECTOR).success is False and self.health.get(COLLECTOR).error == store_reason(exc):
            return  # already failing for this reason: no new run, no new log line
        with self.health.run(COLLECTOR):
            raise exc  # recorded and swallowed by the health book

    async def probe(self) -> None:
        """The `store` job: the database answers, its file is there, and the last call went through."""
        if self.closed:
            return
        with self.health.run(COLLECTOR):
            if self.inline:
                self._check()
            else:
                await asyncio.get_running_loop().run_in_executor(self.pool, self._check)

    def _check(self) -> None:
        if self.sqlite_file is not None and not os.path.exists(self.sqlite_file):
            self._recreate()
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        if self.last_error is not None:
            raise StoreUnavailable(f"the last write failed: {self.last_error}")

    def _recreate(self) -> None:
        """The SQLite file was deleted under the monitor: its connections write into the unlinked
        file (then fail read-only) until they are closed. Close them and create the file anew, at
        schema head, so writes land again; what the old file held is lost, and that is said."""
        from monitor.store.migrate import upgrade

        self.engine.dispose()
        try:
            upgrade(self.engine)
        except Exception as exc:  # its directory is gone or read-only: failing, said, tried again next probe
            raise StoreUnavailable(f"{self._gone()}; it cannot be created again: {store_reason(exc)}") from None
        self.recreated += 1
        self.last_error = None
        log.error("store: the database file %s was deleted; created a new one (schema at head). The history, "
                  "alert states and undelivered notifications it held are lost", self.sqlite_file)

    def _gone(self) -> StoreUnavailable:
        return StoreUnavailable(f"the database file {os.path.basename(self.sqlite_file or '')} is gone")

    def close(self) -> None:
        """Finish what is queued (the history records), then stop the thread."""
        self.closed = True
        self.pool.shutdown(wait=True, cancel_futures=False)


def render_store(worker: StoreWorker) -> Iterator[Metric]:
    recreated = family("inference_monitor_store_recreations_total")
    recreated.add_sample(recreated.name + "_total", {}, float(worker.recreated))
    yield recreated


def store_reason(exc: Exception) -> str:
    text_ = str(exc).split("\n", 1)[0][:300]
    if getattr(exc, "plain", False):
        return text_
    return f"{type(exc).__name__}: {text_}" if text_ else type(exc).__name__


def _log_failure(future: Future[object]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("store write failed: %s", type(future.exception()).__name__)
