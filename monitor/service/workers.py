"""Pages parsed and targets derived in processes of their own (`service.parse_workers`).

Under `infermon serve` the loop fetches every page and one worker thread parses it and derives
its target's numbers: one interpreter, so the process tops out near one core. At 1,000 targets
of 10 models that thread needed more than a core, fell behind, and held the interpreter the loop
answers `/healthz` with (#22). With `parse_workers: N` each target belongs to one of N processes
(a hash of its name). That process keeps the target's parser, series stores and baseline, parses
each page the loop fetched, and derives the target's numbers; the loop gets back what the view,
`/metrics` and the status read (`Ingested`: the gauges, the derived numbers and rates, the
baseline point to store): ~0.4 ms to read against ~10 ms of work on a 10-model page.

    workers = ParseWorkers(settings.service, 2)
    collector = ServiceCollector(settings.service, client, health, workers=workers)
    await collector.scrape(state, cpu)     # the page goes to the target's process
    workers.shutdown()                     # ends the processes it started

A worker that dies (killed, out of memory) fails the scrapes it had in hand as the monitor's
fault (`MonitorFault`: the target keeps its state, the collector's health says so); the next
scrape of its targets starts a new process, which gets each target's stored baseline points with
its first page. Their windows start afresh there: rates come back after two scrapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import multiprocessing
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import httpx

from monitor.config import ServiceSettings, Target
from monitor.exporter import TextWriter
from monitor.health import HealthBook
from monitor.heap import HeapFreezer
from monitor.service.collector import (
    Derived,
    MonitorFault,
    ServiceCollector,
    TargetState,
    apply_points,
    target_view,
)
from monitor.service.engines import find_engine
from monitor.service.extract import Snapshot
from monitor.service.render import target_texts
from monitor.store.baseline import Point

log = logging.getLogger("monitor.service.workers")


@dataclass
class Ingested:
    """What a parse worker sends back after a page: what the loop's side of the target reads."""

    latest: Snapshot | None  # without its series (counters, buckets, http): they stay in the worker
    models: frozenset[str]
    engine: tuple[str, str] | None  # (engine, generation)
    unrecognized: str | None
    duplicates: int
    non_finite: int
    derived: Derived | None
    cpu_wait: float
    points: list[Point]

    @classmethod
    def of(cls, state: TargetState, points: list[Point]) -> Ingested:
        latest = state.latest
        if latest is not None:
            latest = Snapshot(ts=latest.ts, gauges=latest.gauges, labelled=latest.labelled, lora=latest.lora,
                              non_finite=latest.non_finite)
        engine = None if state.engine is None else (state.engine.engine, state.engine.generation)
        return cls(latest, state.models, engine, state.unrecognized, state.duplicates, state.non_finite,
                   state.derived, state.cpu_wait, points)

    def apply(self, state: TargetState) -> None:
        state.latest, state.models, state.derived = self.latest, self.models, self.derived
        state.engine = None if self.engine is None else find_engine(*self.engine)
        state.unrecognized, state.duplicates, state.non_finite = self.unrecognized, self.duplicates, self.non_finite
        state.cpu_wait = self.cpu_wait


@dataclass
class _Slot:
    """One worker process (started at its first page), and how many it has been."""

    index: int
    executor: ProcessPoolExecutor | None = None
    generation: int = 0  # +1 each time its process is replaced: the targets' points go again
    restarts: int = 0
    names: set[str] = field(default_factory=set)  # targets it was sent


class ParseWorkers:
    def __init__(self, settings: ServiceSettings, count: int) -> None:
        # The workers derive; the loop's side keeps the target list.
        self.settings = settings.model_copy(update={"targets": [], "file_sd": [], "shard": None})
        self._slots = [_Slot(i) for i in range(count)]
        self._context = multiprocessing.get_context("spawn")  # never fork a process that runs threads

    def _slot(self, name: str) -> _Slot:
        digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
        return self._slots[int.from_bytes(digest, "big") % len(self._slots)]

    def generation(self, name: str) -> int:
        return self._slot(name).generation

    def _executor(self, slot: _Slot) -> ProcessPoolExecutor:
        if slot.executor is None:
            slot.executor = ProcessPoolExecutor(1, mp_context=self._context, initializer=_start,
                                                initargs=(self.settings, slot.index))
        return slot.executor

    async def ingest(self, state: TargetState, reload: list[Point] | None, text: str, openmetrics: bool,
                     ts: float) -> Ingested:
        """Parse and derive `text` in the target's process: `ServiceCollector._ingest_and_derive`
        there, with `reload` (stored baseline points) first when it holds the target afresh."""
        name = state.target.name
        slot = self._slot(name)
        executor = self._executor(slot)
        slot.names.add(name)
        try:
            return await asyncio.get_running_loop().run_in_executor(
                executor, _ingest, name, state.epoch, state.target, reload, text, openmetrics, ts, time.monotonic())
        except BrokenProcessPool as exc:
            self._replace(slot, executor)
            raise MonitorFault(f"parse worker {slot.index} ended while it read this page; "
                               "a new process takes the target's next scrape") from exc

    def _replace(self, slot: _Slot, executor: ProcessPoolExecutor) -> None:
        if slot.executor is not executor:
            return  # another scrape that was in it replaced it already
        log.error("parse worker %d ended: its %d target(s) start afresh in a new process at their next scrape",
                  slot.index, len(slot.names))
        slot.executor = None
        slot.generation += 1
        slot.restarts += 1
        slot.names.clear()
        executor.shutdown(wait=False, cancel_futures=True)

    def forget(self, name: str) -> None:
        """A target gone or changed: its process drops what it kept of it."""
        slot = self._slot(name)
        if name not in slot.names or slot.executor is None:
            return
        slot.names.discard(name)
        # The process may be gone (its targets with it), or shutting down: nothing left to drop.
        with contextlib.suppress(BrokenProcessPool, RuntimeError):
            slot.executor.submit(_forget, name)

    def pids(self) -> list[int]:
        """The worker processes running now."""
        found: list[int] = []
        for slot in self._slots:
            processes: dict[int, Any] = getattr(slot.executor, "_processes", None) or {}
            found.extend(p.pid for p in processes.values() if p.pid is not None and p.is_alive())
        return found

    def status(self) -> dict[str, object]:
        return {"processes": len(self._slots), "pids": self.pids(),
                "restarts": sum(slot.restarts for slot in self._slots),
                "targets": [len(slot.names) for slot in self._slots]}

    def shutdown(self) -> None:
        """End the processes this started, and wait for them."""
        for slot in self._slots:
            if slot.executor is not None:
                slot.executor.shutdown(wait=True, cancel_futures=True)
                slot.executor = None


# In a worker process: the collector that derives, the targets' states, the heap's freezer.
_COLLECTOR: ServiceCollector | None = None
_STATES: dict[str, TargetState] = {}
_FREEZER = HeapFreezer()
_WRITER = TextWriter()


def _start(settings: ServiceSettings, index: int) -> None:
    global _COLLECTOR
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group: the monitor ends us
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s %(name)s [parse worker {index}]: %(message)s")
    _COLLECTOR = ServiceCollector(settings, httpx.AsyncClient(trust_env=False), HealthBook())
    _COLLECTOR.persist = True  # its baseline points go back to the monitor, which stores them
    _FREEZER.start()  # as the monitor's own worker thread: each page's objects frozen after it


def _ingest(name: str, epoch: int, target: Target, reload: list[Point] | None, text: str, openmetrics: bool,
            ts: float, queued: float) -> Ingested:
    collector = _COLLECTOR
    assert collector is not None, "not a parse worker"
    state = _STATES.get(name)
    if state is None or state.epoch != epoch:
        state = _STATES[name] = collector._new_state(target)
        state.epoch = epoch
    try:
        if reload:
            apply_points(state, reload)
        collector._ingest_and_derive(state, text, openmetrics, ts, queued)
        latest, derived = state.latest, state.derived
        if latest is not None and derived is not None:  # its lines of /metrics while it is up and fresh
            shown = target_view(name, state, up=True, stale=False)
            shown.gauges, shown.labelled, shown.lora, shown.stats = latest.gauges, latest.labelled, latest.lora, \
                derived.stats
            derived.texts = target_texts(collector.view, shown, _WRITER)
        points = list(collector._pending)
        collector._pending.clear()
        return Ingested.of(state, points)
    finally:
        _FREEZER.tick()


def _forget(name: str) -> None:
    _STATES.pop(name, None)
