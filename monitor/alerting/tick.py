"""One tick of the embedded alerting: the rules advanced on what /metrics exports, then the
transitions, the rule states and the long-horizon history's changed days handed to the store thread.

The monitor only schedules it (its own interval, after each collection of `run_once`, after each
publish under `infermon serve`); the evaluator's lock and the history's write queue stay here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor

from prometheus_client import CollectorRegistry
from sqlalchemy.exc import SQLAlchemyError

from monitor.alerting.embedded import EmbeddedEvaluator, StateChanges, registry_samples
from monitor.alerting.model import Alert
from monitor.config import AlertingSettings, HistorySettings
from monitor.exporter import ExpositionCache
from monitor.health import HealthBook
from monitor.history.keeper import first_day
from monitor.history.store import DAY, HistoryTables
from monitor.store.worker import StoreUnavailable, StoreWorker


class AlertTick:
    """`await tick()`: one evaluation. Under `infermon serve` it reads back the pre-rendered page in
    the worker thread `cpu` (no second render on the loop); before the first publish (`run_once`,
    `infermon check`, start-up) it reads the registry."""

    def __init__(self, evaluator: EmbeddedEvaluator, alerting: AlertingSettings, history: HistorySettings, *,
                 registry: CollectorRegistry, exposition: ExpositionCache, cpu: Executor, store_io: StoreWorker,
                 tables: HistoryTables, health: HealthBook, wall: Callable[[], float]) -> None:
        self.evaluator = evaluator
        interval = alerting.evaluation_interval.seconds
        self.slack = min(0.5, 0.05 * interval)
        self.retention_days = history.retention.seconds / DAY
        self.registry, self.exposition, self.cpu = registry, exposition, cpu
        self.store_io, self.tables, self.health, self.wall = store_io, tables, health, wall

    async def __call__(self) -> None:
        done: tuple[list[Alert], StateChanges] | None = None
        with self.health.run("alerts"):  # a failure in the rules is the alerts collector's, counted there
            done = await self._advance()
        if done is None:
            return  # this instant is evaluated already (or the evaluation failed)
        # The transitions and states go to the store thread; a failure there is the store's, not the rules'.
        with contextlib.suppress(StoreUnavailable, SQLAlchemyError):
            await self.store_io.call(self._write, *done)
        await self._write_history()

    async def _advance(self) -> tuple[list[Alert], StateChanges] | None:
        evaluator, latest = self.evaluator, self.exposition.latest
        if latest is None:
            return evaluator.advance_samples(registry_samples(self.registry, evaluator.metrics), self.wall(),
                                             self.slack)
        # read back and advanced in the worker thread, off the loop
        return await asyncio.get_running_loop().run_in_executor(self.cpu, evaluator.advance_page, latest.chunks,
                                                                 latest.rendered_at, self.slack)

    def _write(self, alerts: list[Alert], changes: StateChanges) -> None:
        if not self.evaluator.write(alerts, changes):
            raise StoreUnavailable("alert transitions or states could not be stored (retried next evaluation)")

    async def _write_history(self) -> None:
        days = self.evaluator.take_history_days()
        if not days:
            return
        try:
            await self.store_io.call(self.tables.write, days, first_day(self.wall(), self.retention_days))
        except (StoreUnavailable, SQLAlchemyError):
            self.evaluator.keep_history_days(days)  # a failed write keeps them for the next evaluation's
