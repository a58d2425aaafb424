"""Pages parsed and targets derived in processes of their own (`service.parse_workers`).

Under `infermon serve` the loop fetches every page and one worker thread parses it and derives
its target's numbers: one interpreter, so the process tops out near one core, and a thread that
needs more falls behind and holds the interpreter the loop answers `/healthz` with
(docs/performance.md, "Past one core"). With `parse_workers: N` each target belongs to one of N processes
(a hash of its name). That process keeps the target's parser, series stores and baseline, parses
each page the loop fetched, derives the target's numbers and writes its lines of /metrics; the
loop gets back what the view, `/metrics` and the status read (`Ingested`: the gauges, the
derived numbers, the rates compacted to a row each, the lines, the baseline point to store),
a small part of the work it stands for.

    workers = ParseWorkers(settings.service, 2)
    collector = ServiceCollector(settings.service, client, health, workers=workers)  # in the monitor
    await collector.scrape(state, cpu)     # the page goes to the target's process
    await workers.aclose()                 # ends the processes it started

Each worker is `python -m monitor.service.parse_worker N`, at nice 5, with the loop writing
length-prefixed pickles to its stdin and reading its answers off its stdout: no thread of the
monitor's sits in between. A worker that dies (killed, out of memory) fails the page it had in
hand as the monitor's fault (`MonitorFault`: the target keeps its state, the collector's health
says so); one found dead between pages is replaced before the next. The new process gets each
target's stored baseline points with its first page. Their windows start afresh there: rates
come back after two scrapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import hashlib
import itertools
import logging
import os
import pickle
import signal
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from monitor.config import ServiceSettings, Target
from monitor.exporter import TextWriter
from monitor.heap import HeapFreezer
from monitor.service.baseline import Point
from monitor.service.budget import WorkerStuck
from monitor.service.derive import RowKeys, compact, intern_row
from monitor.service.engines import find_engine
from monitor.service.extract import Snapshot
from monitor.service.render import target_texts
from monitor.service.target import Derived, TargetPipeline, TargetState, apply_points, target_view
from monitor.service.view import ServiceView

log = logging.getLogger("monitor.service.workers")
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux; Python 3.10+ names it


class MonitorFault(RuntimeError):
    """The monitor, not the target, failed to read a page it fetched (a parse worker died): the
    target keeps its state, and the collector's health says so."""


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
    ingest_seconds: float = 0.0

    @classmethod
    def of(cls, state: TargetState, points: list[Point]) -> Ingested:
        latest = state.latest
        if latest is not None:
            latest = Snapshot(ts=latest.ts, gauges=latest.gauges, labelled=latest.labelled, lora=latest.lora,
                              non_finite=latest.non_finite)
        engine = None if state.engine is None else (state.engine.engine, state.engine.generation)
        return cls(latest, state.models, engine, state.unrecognized, state.duplicates, state.non_finite,
                   state.derived, state.cpu_wait, points, state.ingest_seconds)

    def apply(self, state: TargetState) -> None:
        if self.derived is not None:
            known: dict[int, RowKeys] = {}
            for by_model in self.derived.rates.values():
                for rates in by_model.values():
                    intern_row(rates, known)
        state.latest, state.models, state.derived = self.latest, self.models, self.derived
        state.engine = None if self.engine is None else find_engine(*self.engine)
        state.unrecognized, state.duplicates, state.non_finite = self.unrecognized, self.duplicates, self.non_finite
        state.cpu_wait, state.ingest_seconds = self.cpu_wait, self.ingest_seconds


_HEADER = struct.Struct("!Q")  # each message: its length, then its pickle
_PIPE_BYTES = 1 << 20  # a 342 KB page in one write, where the kernel allows it (pipe-max-size)
_NICENESS = 5  # the workers' scheduling priority below the monitor's (CFS: about a third of its weight)


class _Process:
    """One worker process on the loop: requests written to its stdin, answers read off its stdout.

    No thread of the monitor's sits between the loop and the worker: with a pool's feeder and
    result threads each page took several handovers of the interpreter, and the workers waited."""

    def __init__(self, slot: int, process: asyncio.subprocess.Process, after_answer: Callable[[], None]) -> None:
        self.slot = slot
        self.process = process
        self.after_answer = after_answer
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.ids = itertools.count(1)
        self.reader = asyncio.create_task(self._read(), name=f"parse worker {slot}")

    async def call(self, kind: str, *args: object) -> Any:
        stdin = self.process.stdin
        assert stdin is not None
        if self.reader.done():
            raise self.lost()  # no answer would ever be read
        request = next(self.ids)
        answer = asyncio.get_running_loop().create_future()
        self.waiting[request] = answer
        body = pickle.dumps((request, kind, args), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            stdin.write(_HEADER.pack(len(body)) + body)
            await stdin.drain()  # many pages queued for a slow worker: the scrapes wait here
        except (ConnectionError, RuntimeError) as exc:
            self.waiting.pop(request, None)
            raise self.lost() from exc
        return await answer

    def send(self, kind: str, *args: object) -> None:
        """A request nobody waits for (its answer is read and dropped)."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.is_closing():
            body = pickle.dumps((0, kind, args), protocol=pickle.HIGHEST_PROTOCOL)
            stdin.write(_HEADER.pack(len(body)) + body)

    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while True:
                (size,) = _HEADER.unpack(await stdout.readexactly(_HEADER.size))
                request, ok, value = _loads(await stdout.readexactly(size))
                self.after_answer()
                answer = self.waiting.pop(request, None)
                if answer is None or answer.done():
                    continue
                if ok:
                    answer.set_result(value)
                else:
                    answer.set_exception(value)
        except (asyncio.IncompleteReadError, ConnectionError):
            log.debug("parse worker %d: its answers ended (exit status %s)", self.slot, self.process.returncode)
        finally:
            for answer in self.waiting.values():
                if not answer.done():
                    answer.set_exception(self.lost())
            self.waiting.clear()

    def lost(self) -> MonitorFault:
        return MonitorFault(f"parse worker {self.slot} ended while it read this page; "
                            "a new process takes the target's next scrape")

    @property
    def alive(self) -> bool:
        return self.process.returncode is None and not self.reader.done()

    async def close(self, timeout: float = 10.0) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()  # end of input: the worker finishes its page and exits
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        self.reader.cancel()


def _loads(data: bytes) -> Any:
    """An answer read back with the collector off: its ~10,000 objects would start collections
    of the young generations midway, each walking what was read so far (a noticeable share of
    the loop on a large fleet: docs/performance.md); they are frozen next, under serve."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return pickle.loads(data)
    finally:
        if enabled:
            gc.enable()


@dataclass
class _Slot:
    """One worker process (started at its first page), and how many it has been."""

    index: int
    process: _Process | None = None
    starting: asyncio.Task[_Process] | None = None
    generation: int = 0  # +1 each time its process is replaced: the targets' points go again
    restarts: int = 0
    names: set[str] = field(default_factory=set)  # targets it was sent


class WorkersStatus(TypedDict):
    processes: int
    pids: list[int]
    restarts: int
    targets: list[int]  # how many targets each process parses


class ParseWorkers:
    def __init__(self, settings: ServiceSettings, count: int) -> None:
        # The workers derive; the loop's side keeps the target list.
        self.settings = settings.model_copy(update={"targets": [], "file_sd": [], "shard": None})
        self._slots = [_Slot(i) for i in range(count)]
        self._closing: set[asyncio.Task[None]] = set()  # ended processes being reaped
        self.after_answer: Callable[[], None] = lambda: None  # serve: the heap frozen after each answer

    def _slot(self, name: str) -> _Slot:
        digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
        return self._slots[int.from_bytes(digest, "big") % len(self._slots)]

    def generation(self, name: str) -> int:
        return self._slot(name).generation

    async def _process(self, slot: _Slot) -> _Process:
        if slot.process is not None and not slot.process.alive:
            self._replace(slot, slot.process)
        if slot.process is None:
            if slot.starting is None:  # the first page of many that wait for it starts it
                slot.starting = asyncio.create_task(self._start(slot.index))
                slot.starting.add_done_callback(lambda task: self._started(slot, task))
            try:
                await asyncio.shield(slot.starting)
            except Exception as exc:
                raise MonitorFault(f"parse worker {slot.index} did not start: {exc}") from exc
        assert slot.process is not None
        return slot.process

    @staticmethod
    def _started(slot: _Slot, task: asyncio.Task[_Process]) -> None:
        slot.starting = None  # runs before the pages waiting for it go on
        if not task.cancelled() and task.exception() is None:
            slot.process = task.result()

    async def _start(self, index: int) -> _Process:
        # The monitor's package first on the path: the worker imports what the monitor runs.
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "monitor.service.parse_worker", str(index),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env)
        assert process.stdin is not None
        pipe = process.stdin.get_extra_info("pipe")  # None under uvloop: its pipes keep 64 KiB
        with contextlib.suppress(OSError):  # larger pipes: a page in one write (Linux; else 64 KiB)
            if pipe is not None:
                fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
        worker = _Process(index, process, lambda: self.after_answer())
        try:
            await worker.call("start", self.settings)
        except BaseException:
            await worker.close(1.0)
            raise
        log.info("parse worker %d started (pid %d)", index, process.pid)
        return worker

    async def ingest(self, state: TargetState, reload: list[Point] | None, text: str, openmetrics: bool,
                     ts: float, deadline: float | None = None) -> Ingested:
        """Parse and derive `text` in the target's process: `TargetPipeline.ingest_and_derive`
        there, with `reload` (stored baseline points) first when it holds the target afresh. With
        `deadline`, a process that has not answered by then (the page sent, not the start of a new
        process) is stuck on it: killed and replaced, and `WorkerStuck` raised."""
        name = state.target.name
        slot = self._slot(name)
        process = await self._process(slot)
        slot.names.add(name)
        call = process.call("ingest", name, state.epoch, state.target, reload, text, openmetrics, ts, time.monotonic(),
                            state.version)
        try:
            result: Ingested = await (call if deadline is None else asyncio.wait_for(call, deadline))
        except TimeoutError:
            self._replace_stuck(slot, process, name, deadline or 0.0)
            raise WorkerStuck(name) from None
        except MonitorFault:
            self._replace(slot, process)
            raise
        return result

    def _replace_stuck(self, slot: _Slot, process: _Process, name: str, seconds: float) -> None:
        """The worker did not answer `name`'s page within `seconds`: killed (its other pages in
        flight fail as the monitor's fault) and replaced before the next page."""
        if slot.process is not process:
            return  # replaced already
        log.error("parse worker %d (pid %d) did not answer target %s's page within %g s: killed and replaced",
                  slot.index, process.process.pid, name, seconds)
        with contextlib.suppress(ProcessLookupError):
            process.process.kill()
        self._replace(slot, process)

    def _replace(self, slot: _Slot, process: _Process) -> None:
        if slot.process is not process:
            return  # another scrape that was in it replaced it already
        log.error("parse worker %d (pid %d) ended: its %d target(s) start afresh in a new process at their next "
                  "scrape", slot.index, process.process.pid, len(slot.names))
        slot.process = None
        slot.generation += 1
        slot.restarts += 1
        slot.names.clear()
        task = asyncio.get_running_loop().create_task(process.close(1.0))  # reaped
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def forget(self, name: str) -> None:
        """A target gone or changed: its process drops what it kept of it."""
        slot = self._slot(name)
        if name not in slot.names or slot.process is None:
            return
        slot.names.discard(name)
        slot.process.send("forget", name)

    def pids(self) -> list[int]:
        """The worker processes running now."""
        return [slot.process.process.pid for slot in self._slots if slot.process is not None and slot.process.alive]

    def status(self) -> WorkersStatus:
        return {"processes": len(self._slots), "pids": self.pids(),
                "restarts": sum(slot.restarts for slot in self._slots),
                "targets": [len(slot.names) for slot in self._slots]}

    async def aclose(self) -> None:
        """End the processes this started, and wait for them."""
        closing = [slot.process.close() for slot in self._slots if slot.process is not None]
        for slot in self._slots:
            slot.process = None
        await asyncio.gather(*closing, *self._closing, return_exceptions=True)


# In a worker process: the pipeline that derives, the empty view its targets' lines are rendered
# for, the targets' states, the heap's freezer.
_PIPELINE: TargetPipeline | None = None
_VIEW: ServiceView | None = None
_STATES: dict[str, TargetState] = {}
_FREEZER = HeapFreezer()
_WRITER = TextWriter()


def serve(index: int) -> None:
    """A worker's life (`python -m monitor.service.parse_worker N`): requests off stdin, answers to
    stdout, one at a time, until stdin ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group: the monitor ends us
    # Below the monitor's own process: where cores are short, its loop (/healthz, the API, the
    # fetches) goes first and the parsing waits, as the pages' lag says.
    with contextlib.suppress(OSError):
        os.nice(_NICENESS)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s %(levelname)s %(name)s [parse worker {index}]: %(message)s")
    requests = os.fdopen(os.dup(0), "rb", buffering=_PIPE_BYTES)
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # whatever prints goes to stderr, never into the answers
    with contextlib.suppress(OSError):
        fcntl.fcntl(answers.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
    handlers: dict[str, Callable[..., Any]] = {"start": _start, "ingest": _ingest, "forget": _forget}
    while True:
        header = requests.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return  # the monitor closed our input: done
        (size,) = _HEADER.unpack(header)
        request, kind, args = pickle.loads(requests.read(size))
        try:
            answer = (request, True, handlers[kind](*args))
        except Exception as exc:  # the page's or the target's: raised again in the monitor
            answer = (request, False, exc)
        try:
            body = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # an exception that does not pickle: its text does
            body = pickle.dumps((request, False, RuntimeError(f"{type(exc).__name__}: {exc}")))
        answers.write(_HEADER.pack(len(body)) + body)


def _start(settings: ServiceSettings) -> None:
    global _PIPELINE, _VIEW
    _PIPELINE = TargetPipeline(settings, persist=True)  # its baseline points go back to the monitor, to store
    _VIEW = _PIPELINE.empty_view(time.time())
    _FREEZER.start()  # as the monitor's own worker thread: each page's objects frozen after it

def _ingest(name: str, epoch: int, target: Target, reload: list[Point] | None, text: str, openmetrics: bool,
            ts: float, queued: float, version: str | None = None) -> Ingested:
    pipeline, view = _PIPELINE, _VIEW
    assert pipeline is not None and view is not None, "not a parse worker"
    state = _STATES.get(name)
    if state is None or state.epoch != epoch:
        state = _STATES[name] = pipeline.new_state(target)
        state.epoch = epoch
    state.version = version  # the monitor reads it (collector.py): its lines carry it
    try:
        if reload:
            apply_points(state, reload)
        pipeline.ingest_and_derive(state, text, openmetrics, ts, queued)
        latest, derived = state.latest, state.derived
        if latest is not None and derived is not None:  # its lines of /metrics while it is up and fresh
            shown = target_view(name, state, up=True, stale=False)
            shown.gauges, shown.labelled, shown.lora, shown.stats = latest.gauges, latest.labelled, latest.lora, \
                derived.stats
            derived.texts = target_texts(view, shown, _WRITER)
            # The monitor reads the rates for the fleet sums alone: their rows are what it adds.
            derived.rates = {label: {model: compact(rates) for model, rates in by_model.items()}
                             for label, by_model in derived.rates.items()}
        return Ingested.of(state, pipeline.take_points())
    finally:
        _FREEZER.tick()


def _forget(name: str) -> None:
    _STATES.pop(name, None)
