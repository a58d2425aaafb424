"""The service layer's job: scrape every engine target, keep windows, derive the numbers.

This module keeps the target set (static and file_sd), fetches the pages, writes the baseline
points and reports status; what a page does to its target (parse, windows, derivation, baseline
points) is monitor.service.target's, run here or in a parse worker process (monitor.service.workers).

Two ways to drive it:

- `collect()` (tests, `infermon check`, `run_once`): one run scrapes all targets concurrently
  (each under its own deadline, so a hung target costs only its timeout), then derives a fresh
  `ServiceView` that /metrics renders without I/O.
- `monitor.service.schedule.Spreader` (`infermon serve`): each target on its own cadence, at a
  stable offset within the interval; a target's stats are derived right after its own scrape
  (`scrape(state, cpu)`, the CPU part in a worker thread) and `assemble()` builds the view from
  them, the fleet-wide numbers from the cached per-target rates.

A target whose last successful scrape is older than two intervals has no derived series: a
monitor that falls behind shows gaps, never old numbers as current.

`up` is Prometheus' `up`: the scrape succeeded. A valid page that is no engine's is up with its
engine unrecognised (monitor.service.recognize says what it holds); a target not scraped yet is
waiting, neither up nor down.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TypedDict

import httpx

from monitor.aio import Turns, finish
from monitor.config import ServiceSettings, ServiceTarget, Target
from monitor.health import HealthBook
from monitor.promtext import PageError
from monitor.redaction import redact_urls, safe_url
from monitor.scrape import FetchedPage, ScrapeError, fetch_page, fetch_target_page, target_connection
from monitor.service.baseline import BaselineHistory, Point
from monitor.service.budget import REFUSE_INTERVALS, TargetRefused, WorkerStuck, slow_reason, stuck_reason
from monitor.service.derive import Rates, WindowStats, baseline_state, fleet_rates, stats_many
from monitor.service.discovery import DiscoveryError, FileDiscovery
from monitor.service.shard import owned
from monitor.service.target import TargetPipeline, TargetState, apply_points, target_view
from monitor.service.version import MAX_VERSION_BYTES, VERSION_INTERVAL, read_version
from monitor.service.view import ServiceView, target_state
from monitor.service.workers import MonitorFault, ParseWorkers

log = logging.getLogger("monitor.service")
COLLECTOR = "service"
DISCOVERY = "file_sd"
class TargetStatus(TypedDict):
    """One target in /api/v1/status and `infermon check`."""

    name: str
    url: str  # without credentials
    up: bool
    state: str  # up | stale | down | waiting | unrecognized | refused
    stale: bool
    engine: str | None
    engine_pinned: str | None
    engine_recognized: bool | None
    generation: str | None
    note: str
    absent: list[str]  # what the engine's page does not give
    last_scrape: float | None
    last_success: float | None
    scrape_duration_seconds: float | None
    error: str | None
    page_bytes: int
    duplicate_series: int
    non_finite_samples: int
    models: list[str]
    baseline: dict[str, dict[str, str]]  # model -> window -> ready | how far it is warmed up


STALE_INTERVALS = 2  # a target not scraped successfully for this many intervals has no derived series


class ServiceCollector:
    def __init__(
        self,
        settings: ServiceSettings,
        client: httpx.AsyncClient,
        health: HealthBook,
        wall: Callable[[], float] = time.time,
        own_clients: bool = False,
        history: BaselineHistory | None = None,
        workers: ParseWorkers | None = None,
    ) -> None:
        self.settings = settings
        # The baselines' series at a coarse cadence, so that a restart does not blind them.
        self.history = history
        # Each target's page parsed and derived (here, or in a parse worker process); its baseline
        # points queued for the store when there is one (a parse worker's are sent back).
        self.pipeline = TargetPipeline(settings, persist=history is not None)
        self.client = client
        # A connection per target: one shared pool (httpx's, httpcore's) walks all its connections
        # (and polls each idle socket) on every request, which at a thousand kept-alive connections
        # starves the loop; and the wire's client directly, without httpx's per-request cost (scrape.fetch_target_page).
        self.own_clients = own_clients
        self._tls = ssl.create_default_context() if own_clients else None  # one CA store for all
        self._closing: set[asyncio.Task[None]] = set()
        self.health = health
        self.wall = wall
        self.workers = workers  # `service.parse_workers`: processes that keep the series, parse and derive
        self.windows = self.pipeline.windows
        self.objectives = self.pipeline.objectives
        self.targets: dict[str, TargetState] = {}
        self.version = 0  # +1 on every change of the target table (the spreader follows it)
        self.static: list[ServiceTarget] = []
        self.discovery: FileDiscovery | None = None
        self.reconfigure(settings.targets, settings.file_sd)
        self.view = self.assemble(wall())  # every target waiting for its first scrape

    def reconfigure(self, static: Sequence[ServiceTarget], file_sd: Sequence[str]) -> None:
        """New static targets and file_sd files (start-up, SIGHUP); applied at once."""
        self.static = list(static)
        previous = self.discovery.patterns if self.discovery else []
        if list(file_sd) != previous:
            for path in self.discovery.watched() if self.discovery else []:
                self.health.forget(DISCOVERY, path)
            self.discovery = FileDiscovery(list(file_sd)) if file_sd else None
        self._discover()
        self._apply(self.static + (self.discovery.targets() if self.discovery else []))

    def _discover(self) -> bool:
        if self.discovery is None:
            return False
        changed = self.discovery.refresh()
        for path in self.discovery.removed:
            self.health.forget(DISCOVERY, path)
        for path in self.discovery.watched():
            with self.health.run(DISCOVERY, path):
                if path in self.discovery.errors:
                    raise DiscoveryError(self.discovery.errors[path])
        return changed

    def _apply(self, wanted: Sequence[Target]) -> None:
        """Keep the states of unchanged targets; start new ones afresh; drop the ones gone."""
        desired: dict[str, Target] = {}
        for target in owned(self.settings.shard, wanted):
            if target.name in desired:
                log.warning("target name %r is used twice: the first one is kept", target.name)
                continue
            desired[target.name] = target
        for name in list(self.targets):
            if name not in desired or desired[name] != self.targets[name].target:
                self._retire(self.targets.pop(name))
                self.health.forget(COLLECTOR, name)
                if self.workers is not None:
                    self.workers.forget(name)
        for name, target in desired.items():
            if name not in self.targets:
                self.targets[name] = self._new_state(target)
        self.version += 1

    def _new_state(self, target: Target) -> TargetState:
        pool = target_connection(self.settings, self._tls) if self._tls is not None else None
        state = self.pipeline.new_state(target, pool)
        self._reload_baseline(state)
        return state

    def _baseline_retention(self) -> float:
        return max(w.seconds for w in self.windows) + 2 * self.settings.baseline_window.seconds

    def _reload_baseline(self, state: TargetState) -> None:
        """The target's stored baseline points (a restart, a target back in file_sd). With parse
        workers they go with the target's next page, to the process that keeps its series."""
        if self.history is None or self.workers is not None:
            return
        points = self.stored_points(state.target.name)
        apply_points(state, points)
        if points:
            log.info("target %s: %d baseline points reloaded from the store", state.target.name, len(points))

    def stored_points(self, name: str) -> list[Point]:
        if self.history is None:
            return []
        return self.history.load(name, self.wall() - self._baseline_retention())

    def flush_baselines(self) -> None:
        """Write the queued baseline points and prune the ones the baselines no longer need."""
        if self.history is None:
            return
        self.history.save(self.pipeline.take_points(), self.wall() - self._baseline_retention())

    def _retire(self, state: TargetState) -> None:
        """A target gone or changed: close its own pool (later, on the loop, if one runs)."""
        if state.pool is None:
            return
        try:
            task = asyncio.get_running_loop().create_task(finish(state.pool.aclose()))
        except RuntimeError:
            return  # no loop (start-up): nothing was opened yet
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        pools = [s.pool for s in self.targets.values() if s.pool is not None]
        await asyncio.gather(*(finish(p.aclose()) for p in pools), *self._closing, return_exceptions=True)

    async def collect(self) -> ServiceView:
        if self._discover():
            self._apply(self.static + (self.discovery.targets() if self.discovery else []))
        await asyncio.gather(*(self.scrape(state) for state in self.targets.values()))
        self.view = self.derive(self.wall())
        return self.view

    def refresh_targets(self) -> None:
        """Follow file_sd changes (the spread scheduler calls this on each tick)."""
        if self._discover():
            self._apply(self.static + (self.discovery.targets() if self.discovery else []))

    async def scrape(self, state: TargetState, cpu: Executor | None = None) -> None:
        """Scrape one target. With `cpu`, parsing and this target's derivation run on that executor
        (one worker thread: the event loop keeps answering while a thousand pages are parsed)."""
        name = state.target.name
        was_up = state.up
        with self.health.run(COLLECTOR, name):
            started = self.wall()
            state.last_scrape = started
            try:
                if state.refused_until is not None and time.monotonic() < state.refused_until:
                    raise TargetRefused(state.error or "refused")  # sitting out its slow page: not fetched
                state.refused_until = None
                timeout, limit = self.settings.scrape_timeout.seconds, self.settings.max_page_bytes
                if state.pool is not None:
                    fetched = await fetch_target_page(state.pool, state.target.url, timeout, limit)
                else:
                    fetched = await fetch_page(self.client, state.target.url, timeout, limit)
                ingest_started = time.monotonic()
                if cpu is None:
                    self.pipeline.ingest(state, fetched.text, fetched.openmetrics, started)
                    state.ingest_seconds = time.monotonic() - ingest_started
                elif self.workers is not None:
                    await self._ingest_elsewhere(self.workers, state, fetched.text, fetched.openmetrics, started)
                else:
                    await asyncio.get_running_loop().run_in_executor(
                        cpu, self.pipeline.ingest_and_derive, state, fetched.text, fetched.openmetrics, started,
                        ingest_started)
                state.page_bytes = fetched.size
                self._within_time(state, state.ingest_seconds)
                if state.duplicates:
                    log.warning("target %s: %d duplicate series on the page (first one kept)", name, state.duplicates)
            except (ScrapeError, PageError) as exc:
                state.up, state.error, state.unrecognized = False, str(exc), None
                if isinstance(exc, TargetRefused) and not state.refused:
                    log.warning("target %s %s", name, exc)  # the other targets and jobs go on
                state.refused = isinstance(exc, TargetRefused)
                raise
            except MonitorFault:
                raise  # no verdict on the target: its page was fetched, the monitor could not read it
            except Exception as exc:  # a bug on some page: down with the reason, never stale "up"
                state.up, state.error, state.unrecognized = False, f"{type(exc).__name__}: {exc}", None
                raise
            if state.unrecognized is not None:
                if state.unrecognized != state.error:
                    log.warning("target %s answers, engine not recognised: %s", name, state.unrecognized)
            elif not state.up or state.error is not None:
                log.info("target %s is up (%s %s)", name, state.engine.engine if state.engine else "?",
                         state.engine.generation if state.engine else "?")
            state.up, state.error, state.last_ok = True, state.unrecognized, started
            state.refused = False
        await self._read_version(state, started, was_up)

    async def _read_version(self, state: TargetState, started: float, was_up: bool) -> None:
        """The engine's version (monitor/service/version.py) when the target came up and every
        VERSION_INTERVAL after, through the connection its page came by. A failed read keeps the
        version a running engine had (no change from one slow answer); after a restart it is unknown."""
        engine = state.engine
        if not self.settings.engine_version or engine is None or (was_up and state.version_read_at is not None
                              and started - state.version_read_at < VERSION_INTERVAL):
            return
        state.version_read_at = started
        pool, timeout = state.pool, self.settings.scrape_timeout.seconds

        async def fetch(url: str) -> FetchedPage:
            if pool is not None:
                return await fetch_target_page(pool, url, timeout, MAX_VERSION_BYTES)
            return await fetch_page(self.client, url, timeout, MAX_VERSION_BYTES)

        found = await read_version(fetch, state.target.url, engine.engine)
        if found is None and was_up:
            return
        if found != state.version and state.version is not None:
            log.info("target %s: %s %s -> %s", state.target.name, engine.engine, state.version, found or "unknown")
        state.version = found

    def _within_time(self, state: TargetState, took: float) -> None:
        """A page that took longer than `max_ingest_time` to parse and derive: its target sits out
        REFUSE_INTERVALS scrapes (an engine's page does not turn cheap from one scrape to the next)."""
        budget = self.settings.max_ingest_time.seconds
        if took <= budget:
            return
        interval = self.settings.scrape_interval.seconds
        state.refused_until = time.monotonic() + REFUSE_INTERVALS * interval
        raise TargetRefused(slow_reason(took, budget, interval))

    async def _ingest_elsewhere(
        self, workers: ParseWorkers, state: TargetState, text: str, openmetrics: bool, ts: float
    ) -> None:
        """`TargetPipeline.ingest_and_derive` in the parse worker that keeps this target's series; what the
        view and the status read comes back (`Ingested`)."""
        generation = workers.generation(state.target.name)
        reload = None
        if state.sent_to != generation:
            reload = self.stored_points(state.target.name)  # a new state, or a new worker process
        # A worker busy with one page far past the budget is stuck on it: it is replaced, and the
        # page's target refused, so that the other targets of that worker are read again.
        deadline = max(3 * self.settings.max_ingest_time.seconds, self.settings.scrape_timeout.seconds)
        try:
            done = await workers.ingest(state, reload, text, openmetrics, ts, deadline)
        except WorkerStuck:
            state.derived = None
            interval = self.settings.scrape_interval.seconds
            state.refused_until = time.monotonic() + REFUSE_INTERVALS * interval
            raise TargetRefused(stuck_reason(deadline, self.settings.max_ingest_time.seconds, interval)) from None
        except (MonitorFault, asyncio.CancelledError):
            state.derived = None  # the points may not have reached the worker: they go with the next page
            raise
        except Exception:
            state.derived = None  # as `ingest_and_derive` leaves it when the page fails
            state.sent_to = generation  # the worker read the points before the page failed
            raise
        state.sent_to = generation
        done.apply(state)
        if reload:
            log.info("target %s: %d baseline points reloaded from the store", state.target.name, len(reload))
        self.pipeline.pending.extend(done.points)

    def derive(self, now: float) -> ServiceView:
        """Every target's numbers evaluated at `now` (after `collect()`: all scraped just before)."""
        for state in self.targets.values():
            fresh = state.up and state.latest is not None and not self.is_stale(state, now)
            state.derived = self.pipeline.derive(state, now) if fresh else None
        return self.assemble(now)

    def is_stale(self, state: TargetState, now: float) -> bool:
        last = state.latest.ts if state.latest is not None else state.last_ok
        return last is None or now - last > STALE_INTERVALS * self.settings.scrape_interval.seconds

    def assemble(self, now: float) -> ServiceView:
        """The view from each target's derived numbers; the fleet sums from their rates.

        Safe to run in a worker thread while the loop scrapes: it reads a copy of the target
        table and each target's last `Derived`, replaced whole, never changed in place.
        """
        view = self.pipeline.empty_view(now)
        per_window: dict[str, list[dict[str, Rates]]] = {w.label: [] for w in self.windows}
        # (model, window) -> the stats of every target serving it, to skip a fleet sum of one.
        served: dict[tuple[str, str], list[WindowStats]] = {}
        for name, state in list(self.targets.items()):
            latest, derived = state.latest, state.derived
            stale = state.up and self.is_stale(state, now)
            view.targets[name] = shown = target_view(name, state, state.up, stale)
            if not shown.up or latest is None or derived is None:
                continue  # a down or stale target's series disappear
            shown.gauges = latest.gauges
            shown.labelled = latest.labelled
            shown.lora = latest.lora
            shown.stats = derived.stats
            shown.texts = derived.texts
            for window in self.windows:
                per_window[window.label].append(derived.rates.get(window.label, {}))
            for key, stats in derived.stats.items():
                served.setdefault(key, []).append(stats)
        for window in self.windows:
            targets = per_window[window.label]
            # A model on one target: the fleet sum is that target's numbers, already derived; only
            # models served by two targets or more are summed.
            several = {model for (model, label), each in served.items() if label == window.label and len(each) > 1}
            summed = fleet_rates([target if several.issuperset(target) else {m: r for m, r in target.items()
                                                                              if m in several} for target in targets])
            models = list(dict.fromkeys(model for target in targets for model in target))
            shared = dict(zip(summed, stats_many(list(summed.values()), self.objectives), strict=True))
            for model in models:
                alone = served[(model, window.label)]
                view.fleet[(model, window.label)] = alone[0] if len(alone) == 1 else shared[model]
        return view

    def _baselines(self, state: TargetState) -> dict[str, dict[str, str]]:
        """model -> window -> "ready" | "baseline warming up: 12 of 60 min"."""
        found: dict[str, dict[str, str]] = {}
        derived = state.derived
        for (model, window), stats in (derived.stats.items() if derived else []):
            found.setdefault(model, {})[window] = baseline_state(
                stats.baseline_coverage, self.settings.baseline_window.seconds, self.settings.baseline_min_coverage)
        return found

    def status(self) -> list[TargetStatus]:
        return [self._status_row(name, state) for name, state in self.targets.items()]

    async def status_in_turns(self) -> list[TargetStatus]:
        """`status()` on the loop, the loop's other work let in between rows."""
        turn, rows = Turns(), list[TargetStatus]()
        for name, state in list(self.targets.items()):
            rows.append(self._status_row(name, state))
            await turn()
        return rows

    def _status_row(self, name: str, state: TargetState) -> TargetStatus:
        entry = self.health.get(COLLECTOR, name)
        stale = state.up and self.is_stale(state, self.wall())
        return {
            "name": name,
            "url": safe_url(state.target.url),
            "up": state.up and not stale,
            "state": "refused" if state.refused else target_state(state.up, stale, state.error, state.unrecognized),
            "stale": stale,
            "engine": state.engine.engine if state.engine else None,
            "engine_pinned": state.target.engine,
            "engine_recognized": None if not state.up else state.unrecognized is None,
            "generation": state.engine.generation if state.engine else None,
            "note": state.engine.note(state.target.model) if state.engine else "",
            "absent": list(state.engine.absent()) if state.engine else [],
            "last_scrape": state.last_scrape,
            "last_success": entry.last_success,
            "scrape_duration_seconds": entry.duration_seconds,
            "error": redact_urls(state.error) if state.error else None,
            "page_bytes": state.page_bytes,
            "duplicate_series": state.duplicates,
            "non_finite_samples": state.non_finite,
            "models": sorted(state.models) if state.latest and state.up else [],
            "baseline": self._baselines(state),
        }

