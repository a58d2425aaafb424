"""One engine target's pipeline, without I/O: its state, a fetched page read into it, its numbers
derived, its baseline points.

The collector (monitor.service.collector) fetches each page and hands it here, on the loop or in
its worker thread; a parse worker process (monitor.service.workers) runs the same pipeline on the
targets it keeps. Both read and write a target through these functions alone.

    pipeline = TargetPipeline(settings.service)
    state = pipeline.new_state(target)
    pipeline.ingest_and_derive(state, text, openmetrics, ts, time.monotonic())
    state.derived.stats                    # (model, window) -> WindowStats
    pipeline.take_points()                 # the baseline points to store (when `persist`)
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from monitor.config import ServiceSettings, Target
from monitor.promtext import PageError, Parser, check_text
from monitor.service.baseline import Point
from monitor.service.budget import check_models, check_series
from monitor.service.derive import (
    BASELINE_COUNTERS,
    LENGTH_HISTOGRAMS,
    Objectives,
    Rates,
    Window,
    WindowStats,
    stats_many,
    window_rates,
)
from monitor.service.engines import UNKNOWN_MODEL, EngineSpec, detect, find_engine, is_router, router_sample
from monitor.service.extract import SPLIT_VALUES, ExtractMemo, Snapshot, extract
from monitor.service.recognize import unrecognized_reason
from monitor.service.series import SeriesStore
from monitor.service.view import ServiceView, TargetLines, TargetView

if TYPE_CHECKING:
    from monitor.scrape import TargetConnection

log = logging.getLogger("monitor.service")
_EPOCHS = itertools.count()
ROUTER_PAGE = ("a router page (vLLM production-stack: vllm:current_qps{server}), not a serving engine: "
               "scrape the engines behind it")


@dataclass
class Derived:
    """One target's numbers, derived right after its scrape (evaluated at the scrape's time)."""

    at: float
    stats: dict[tuple[str, str], WindowStats]  # (model, window)
    rates: dict[str, dict[str, Rates]]  # window -> model -> rates, for the fleet sums
    # The target's lines of /metrics, family by family, as a parse worker rendered them for the
    # view of the target (its `ServiceText` key) while it is up and fresh: not rendered again.
    texts: TargetLines | None = None


@dataclass
class TargetState:
    """One target as the monitor keeps it: its parser and windows, its last snapshot and numbers,
    and how its last scrape went."""

    target: Target
    parser: Parser = field(default_factory=Parser)
    memo: ExtractMemo = field(default_factory=ExtractMemo)
    store: SeriesStore = field(default_factory=lambda: SeriesStore(0.0))
    baseline: SeriesStore = field(default_factory=lambda: SeriesStore(0.0))  # BASELINE_COUNTERS, lengths
    latest: Snapshot | None = None
    engine: EngineSpec | None = None
    up: bool = False
    unrecognized: str | None = None  # the page answered but is no engine's: what it holds
    last_ok: float | None = None  # start of the last successful scrape
    persisted_at: float | None = None  # time of the last baseline point queued for the store
    last_scrape: float | None = None
    error: str | None = None
    page_bytes: int = 0
    duplicates: int = 0
    non_finite: int = 0
    derived: Derived | None = None
    cpu_wait: float = 0.0  # seconds the last scrape's parse waited for the worker thread
    pool: TargetConnection | None = None  # the target's own connection (own_clients)
    models: frozenset[str] = frozenset()  # the models of the last snapshot
    epoch: int = field(default_factory=lambda: next(_EPOCHS))  # this state, among the target's states
    sent_to: int = -1  # the parse worker (`service.parse_workers`) generation its baseline points went to
    refused: bool = False  # its last page was over one of its budgets (monitor/service/budget.py)
    refused_until: float | None = None  # monotonic time before which it is not scraped (a slow page)
    ingest_seconds: float = 0.0  # the last page's parse and derivation (where it ran)
    version: str | None = None  # the engine's version, from its API (monitor/service/version.py)
    version_read_at: float | None = None  # when it was last read (None: at the next scrape that finds it up)


class TargetPipeline:
    """What each target's page goes through, with the service settings it needs: parsed within the
    target's budgets, kept in its windows, its numbers derived, its baseline points queued.

    `persist`: queue a baseline point at a coarse cadence, for the store (the collector with a
    history writes them; a parse worker sends them back to the monitor, which does)."""

    def __init__(self, settings: ServiceSettings, persist: bool = False) -> None:
        self.settings = settings
        self.windows = [Window(w.text, w.seconds) for w in settings.windows]
        self.objectives = Objectives(settings.slo.ttft.seconds, settings.slo.tpot.seconds)
        self.persist = persist
        self.pending: deque[Point] = deque()  # appended by the parse thread, taken by take_points()

    def new_state(self, target: Target, pool: TargetConnection | None = None) -> TargetState:
        """A target's state afresh: series stores as long as its windows and baseline need."""
        interval = self.settings.scrape_interval.seconds
        longest = max(w.seconds for w in self.windows)
        baseline = self.settings.baseline_window.seconds
        return TargetState(
            target,
            store=SeriesStore(longest + interval),
            # The baseline's rates read one baseline window before a window's start; how far back
            # its history reaches (its coverage) is read over two, from the throughput's counter.
            baseline=SeriesStore(longest + baseline + interval,
                                 reach=("generation_tokens", longest + 2 * baseline + interval)),
            pool=pool,
        )

    def empty_view(self, now: float) -> ServiceView:
        """A view of no targets, with the windows, objectives and baseline settings of their numbers."""
        return ServiceView(ts=now, windows=self.windows, objectives=self.objectives,
                           baseline_seconds=self.settings.baseline_window.seconds,
                           baseline_min_coverage=self.settings.baseline_min_coverage)

    def take_points(self) -> list[Point]:
        """The queued baseline points, taken (popleft is atomic: none lost to a concurrent scrape)."""
        points = []
        while self.pending:
            points.append(self.pending.popleft())
        return points

    def ingest_and_derive(self, state: TargetState, text: str, openmetrics: bool, ts: float, queued: float) -> None:
        """`ingest`, then the target's numbers at `ts`; `queued`: when the page was handed over."""
        began = time.monotonic()
        state.cpu_wait = began - queued
        state.derived = None
        state.ingest_seconds = 0.0
        self.ingest(state, text, openmetrics, ts)
        if state.latest is not None:
            state.derived = self.derive(state, ts)
        state.ingest_seconds = time.monotonic() - began  # the work alone: not the queue, not a worker's start

    def ingest(self, state: TargetState, text: str, openmetrics: bool, ts: float) -> None:
        """A fetched page into the target's state: its engine, its snapshot kept in the windows.
        A page over a budget raises `TargetRefused`; a router's or a broken one, `PageError`."""
        check_text(text)
        check_series(text, self.settings.max_series_per_target)  # before any parse: the page's lines alone
        prefix = state.target.metric_prefix
        spec = detect(text, prefix, state.target.engine)
        if spec is None:
            if is_router(text, prefix):
                raise PageError(ROUTER_PAGE)
            state.unrecognized = unrecognized_reason(text, state.parser, prefix, state.target.engine)
            state.latest, state.engine, state.models = None, None, frozenset()
            state.store.clear()
            state.baseline.clear()
            return
        # The router's marker is among the names this parse reads: no scan of the page of its own.
        page = state.parser.parse(text, spec.page_names(prefix), openmetrics)
        if router_sample(page):
            raise PageError(ROUTER_PAGE)
        state.unrecognized = None
        if spec is not state.engine:
            # Another engine or generation: old snapshots use other names, start afresh.
            state.store.clear()
            state.baseline.clear()
            state.engine = spec
        default_model = state.target.model or UNKNOWN_MODEL
        snap = extract(page, spec, ts, default_model, state.memo)
        check_models(len(snap.models()), self.settings.max_models_per_target)
        if snap.split_dropped and (state.latest is None or not state.latest.split_dropped):
            log.warning("target %s: %d samples past the first %d label values of a split counter (speculative-"
                        "decoding positions) dropped", state.target.name, snap.split_dropped, SPLIT_VALUES)
        state.duplicates, state.non_finite = page.duplicates, snap.non_finite
        self.remember(state, snap)

    def remember(self, state: TargetState, snap: Snapshot) -> None:
        """A snapshot into the target's windows and baseline; a baseline point queued at its cadence."""
        state.latest = snap
        state.models = frozenset(snap.models())
        state.store.append(snap)
        counters = {metric: snap.counters[metric] for metric in BASELINE_COUNTERS if metric in snap.counters}
        counters.setdefault("generation_tokens", {})
        lengths = {metric: snap.buckets[metric] for metric in LENGTH_HISTOGRAMS if metric in snap.buckets}
        point = Snapshot(ts=snap.ts, counters=counters, buckets=lengths)
        state.baseline.append(point)
        cadence = max(self.settings.scrape_interval.seconds, self.settings.baseline_window.seconds / 60)
        if self.persist and state.engine is not None and (
                state.persisted_at is None or snap.ts - state.persisted_at >= cadence):
            self.pending.append(Point(state.target.name, state.engine.engine, state.engine.generation, point))
            state.persisted_at = snap.ts

    def derive(self, state: TargetState, now: float) -> Derived:
        """The target's numbers in every window, evaluated at `now`."""
        derived = Derived(at=now, stats={}, rates={})
        counts_errors = state.engine is not None and "errors" in state.engine.counters
        for window in self.windows:
            derived.rates[window.label] = window_rates(
                state.store, now, window, state.baseline, self.settings.baseline_window.seconds, counts_errors,
                self.settings.baseline_min_coverage,
            )
        keys = [(model, label) for label, rates in derived.rates.items() for model in rates]
        # Every window's histograms at once: one numpy pass per set of bucket bounds.
        every = stats_many([derived.rates[label][model] for model, label in keys], self.objectives)
        derived.stats = dict(zip(keys, every, strict=True))
        return derived


def apply_points(state: TargetState, points: Sequence[Point]) -> None:
    """Stored baseline points into the target's baseline store, oldest first."""
    for point in points:
        spec = find_engine(point.engine, point.generation)
        if spec is None or (state.engine is not None and spec is not state.engine):
            state.baseline.clear()  # another engine's names: only the newest engine's points count
        state.engine = spec
        if spec is not None:
            state.baseline.append(point.snapshot)
            state.persisted_at = point.snapshot.ts


def target_view(name: str, state: TargetState, up: bool, stale: bool) -> TargetView:
    """The view of one target as its state says, without its numbers (`assemble` adds them)."""
    engine = state.engine
    return TargetView(
        name=name,
        up=up and not stale,
        engine=engine.engine if engine else None,
        generation=engine.generation if engine else None,
        stale=stale,
        note=engine.note(state.target.model) if engine else "",
        waiting=not up and state.error is None,
        recognized=state.unrecognized is None,
        detail=state.error,
        refused=state.refused,
        version=state.version if engine else None,
    )
