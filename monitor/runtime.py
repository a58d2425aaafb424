"""The monitor assembled from settings: collectors as jobs, one health book, one registry.

Kept apart from FastAPI so tests (and `infermon check`) can run collection cycles directly
with an injected HTTP client and clock.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import httpx
from prometheus_client.core import Metric

from monitor import __version__
from monitor.alerting.context import Views
from monitor.alerting.delivery import Delivery, render_delivery
from monitor.alerting.digest import queue_digest
from monitor.alerting.embedded import AlertingStatus, EmbeddedEvaluator, Transitions
from monitor.alerting.explain import Explainer
from monitor.alerting.model import AlertSink
from monitor.alerting.tick import AlertTick
from monitor.canary.collector import CanaryCollector
from monitor.canary.part import CanaryPart
from monitor.catalog import CATALOG, family
from monitor.clock import ClockStatus, SteadyClock
from monitor.config import ConfigError, ServiceSettings, Settings
from monitor.cost.collector import CostCollector
from monitor.cost.part import CostPart
from monitor.exporter import ExpositionCache, TextWriter, make_registry, render_health, render_text
from monitor.health import CollectorHealth, CollectorStatus, HealthBook, JobStatus
from monitor.heap import AfterEachJob, HeapFreezer, HeapStatus
from monitor.history.keeper import build_keeper, first_day
from monitor.history.store import DAY, HistoryTables
from monitor.history.summary import trend_rows
from monitor.infra.collector import InfraCollector, import_pynvml
from monitor.infra.part import InfraPart
from monitor.layer import SERVICE, Job, Layer, OwnPart, Part
from monitor.looplag import LoopLagProbe, LoopLagStatus, render_loop_lag
from monitor.quality.layer import QualityLayer
from monitor.quality.part import QualityPart
from monitor.quality.store import QualityStore
from monitor.rulefiles.rules import RulesError, RuleSet, load_rules
from monitor.scrape import pool_limits
from monitor.service.baseline import BaselineHistory
from monitor.service.collector import ServiceCollector, TargetStatus
from monitor.service.part import ServicePart
from monitor.service.schedule import SCRAPES, Spreader, render_schedule
from monitor.service.workers import ParseWorkers
from monitor.settings_check import check_settings, load_checked_settings
from monitor.store.session import EventRow, Store
from monitor.store.worker import StoreWorker, render_store
from monitor.web.digest import digest_text
from monitor.web.history import History
from monitor.web.overview import headline, overview, overview_in_turns
from monitor.web.shapes import Overview

log = logging.getLogger("monitor.runtime")


@dataclass
class ReloadState:
    """Like Prometheus' prometheus_config_last_reload_successful: did the last SIGHUP reload work."""

    successful: bool = True
    at: float | None = None
    error: str | None = None

    def failed(self, at: float, error: str) -> None:
        self.successful, self.at, self.error = False, at, error

    def succeeded(self, at: float) -> None:
        self.successful, self.at, self.error = True, at, None


class ConfigStatus(TypedDict):
    file: str | None
    last_reload_successful: bool
    last_reload: float | None
    last_reload_error: str | None


class SetClock(TypedDict):
    source: str  # "set": a clock a test or the demo gave


class AlertingOff(TypedDict):
    enabled: bool  # False: the rules are evaluated elsewhere (Prometheus)


class MonitorStatus(TypedDict):
    """GET /api/v1/status: every layer's section and the monitor's own parts; "overview" holds
    the page's numbers (`infermon status` prints them)."""

    version: str
    started: float
    uptime_seconds: float
    ready: bool
    layers: dict[str, Mapping[str, object]]  # each layer's own status type (ServiceStatus, InfraStatus, ...)
    topology: dict[str, object]
    config: ConfigStatus
    collectors: list[CollectorStatus]
    jobs: list[JobStatus]
    recent_events: list[EventRow]
    alerting: AlertingStatus | AlertingOff
    event_loop: LoopLagStatus
    clock: ClockStatus | SetClock
    heap: HeapStatus
    overview: Overview


def render_reload(state: ReloadState) -> Iterator[Metric]:
    fam = family("inference_monitor_config_last_reload_successful")
    fam.add_sample(fam.name, {}, 1.0 if state.successful else 0.0)
    yield fam


class Monitor:
    def __init__(
        self,
        settings: Settings,
        client: httpx.AsyncClient | None = None,
        wall: Callable[[], float] | None = None,
        load_nvml: Callable[[], Any] = import_pynvml,
        config_path: Path | None = None,
        sink: AlertSink | None = None,
        transitions: Transitions | None = None,
    ) -> None:
        self.settings = settings
        self.config_path = config_path
        self.reloads = ReloadState()
        # Unless a test sets it: wall time that a step of the system clock does not move (monitor/clock.py).
        wall = self.wall = wall if wall is not None else SteadyClock()
        check_settings(settings, config_path)  # first: a bad setting or rule file fails before anything is opened
        ruleset = load_ruleset(settings)
        self.started = wall()
        self.collected_at: dict[str, float] = {}  # layer -> when its first collection since start ended
        self.health = HealthBook(wall=wall)
        self.store = Store(settings.storage.url)
        # Every store call of the outbox, the evaluator and the history on one thread, off the loop.
        self.store_io = StoreWorker(self.store.engine, self.health)
        self.events = self.store.recent_events(20)  # the history's newest, kept by the store thread
        self.health.listeners.append(self._on_health_change)
        self.client = client or httpx.AsyncClient(follow_redirects=True, trust_env=False,
                                                  limits=pool_limits(settings.service))
        self.heap = HeapFreezer()  # under `infermon serve`: each job of `cpu` ends by freezing what is alive
        self.cpu = AfterEachJob(self.heap.tick, 1, thread_name_prefix="infermon-cpu")  # parse, derive, render
        workers = settings.service.parse_workers
        self.service = ServiceCollector(settings.service, self.client, self.health, wall,
                                        own_clients=client is None, history=BaselineHistory(self.store.engine),
                                        workers=ParseWorkers(settings.service, workers) if workers else None)
        # infra: local GPUs (NVML, or the trace in infra.replay.file) and dcgm-exporter targets
        self.infra = InfraCollector(settings.infra, self.client, self.health, wall, load_nvml)
        self.quality = QualityLayer(settings.quality, QualityStore(self.store.engine), self.health, wall)
        self.quality.io = self.store_io.call
        self.canary = CanaryCollector(settings.canary, self.health, wall, service_view=lambda: self.service.view)
        self.cost = CostCollector(settings, self.service, self.infra, self.health, self.store, wall)
        self.cost.io = self.store_io.call
        # alerting delivery: the evaluator and POST /api/v1/alertmanager write to the sink (the outbox)
        self.delivery = Delivery(settings.alerting, self.store.engine, self.client, wall, worker=self.store_io)
        self.sink: AlertSink = self.delivery
        self.loop_lag = LoopLagProbe()  # its task runs under `infermon serve` (monitor/app.py's lifespan)
        self.history = History()  # the overview page's last hour of headline series
        self.writer = TextWriter()
        # alerting: the rule files evaluated in-process on what /metrics exports
        self.transitions: Transitions = transitions or (lambda: self.delivery.recent(50))
        self.alerting: EmbeddedEvaluator | None = None
        # the long-horizon history the trend rules read (alerts/trend.yml), reloaded from the store
        self.history_tables = HistoryTables(self.store.engine)
        self.trend_history = build_keeper(settings.history, ruleset)
        if self.trend_history is not None:
            now = wall()
            self.trend_history.load(self.history_tables.read(first_day(now, self.trend_history.longest_days),
                                                             self.trend_history.memory_names), now)
        if ruleset is not None:
            self.alerting = EmbeddedEvaluator(ruleset, self.store.engine, sink or self.delivery,
                                              settings.alerting.external_url, history=self.trend_history)
            if self.trend_history is not None:
                self.alerting.trends = trend_rows(self.trend_history, wall())
        # alert context: the other layers' evidence and a probable cause on each alert as it fires
        self.explainer = Explainer(self.views, settings.alerting.causes)
        if self.alerting is not None:
            self.alerting.explain = self.explainer
            self.alerting.collected = self.collected
        self.spreader: Spreader | None = None  # under `infermon serve`: each target on its own cadence
        self.service_layer = ServicePart(self.service, loop=self.run_service, schedule=lambda: self.spreader)
        self.layers: dict[str, Layer] = {layer.name: layer for layer in (
            self.service_layer, InfraPart(self.infra), QualityPart(self.quality), CanaryPart(self.canary),
            CostPart(self.cost))}
        parts = self._parts()
        self.jobs = [job for part in parts for job in part.jobs]
        self.registry = make_registry([part.render for part in parts])
        # What /metrics serves under `infermon serve`, and what in-process readers take:
        # `monitor.exposition.latest.body`, rendered once per publish tick in the worker thread.
        # The service layer's families come first on the page, written apart (each target's lines
        # kept until it is scraped again); the rest through the registry.
        served = [self.service_layer.render_kept if part is self.service_layer else part.render for part in parts]
        self.exposition = ExpositionCache(make_registry(served), wall, prefix=self.service_layer.write_targets)
        self.alert_tick = None if self.alerting is None else AlertTick(
            self.alerting, settings.alerting, settings.history, registry=self.registry, exposition=self.exposition,
            cpu=self.cpu, store_io=self.store_io, tables=self.history_tables, health=self.health,
            wall=lambda: self.wall())  # read when it ticks: a test may set the monitor's clock after start

    def _parts(self) -> list[Part]:
        """The layers and the monitor's own parts, in the order of the jobs (one `run_once` cycle:
        cost after service and infra) and of the families on /metrics."""
        layers, storage = self.layers, self.settings.storage
        parts: list[Part] = [
            layers["service"], layers["infra"],
            OwnPart("health", lambda: render_health(self.health)),
            OwnPart("upkeep", jobs=(Job("retention", 3600.0, self.prune),
                                    Job("baseline_history", 60.0, self.flush_baselines))),
            layers["quality"],
            OwnPart("reload", lambda: render_reload(self.reloads)),
            layers["canary"], layers["cost"],
            OwnPart("schedule", lambda: render_schedule(self.spreader)),
            OwnPart("delivery", lambda: render_delivery(self.delivery),
                    (Job("delivery", 1.0, self.delivery.run_once),)),
            OwnPart("store", lambda: render_store(self.store_io),
                    (Job("store", storage.check_interval.seconds, self.store_io.probe),)),
            OwnPart("loop_lag", lambda: render_loop_lag(self.loop_lag)),
        ]
        digest = self.settings.history.digest
        if digest.enabled:  # weekly, in its time zone; not part of a collection cycle
            parts.append(OwnPart("digest", jobs=(Job("history_digest", 7 * DAY, self.post_digest,
                                                     cron=f"0 {digest.hour} * * {digest.weekday}",
                                                     timezone=digest.timezone),)))
        if self.alerting is not None:  # the firing counts join /metrics
            interval = self.settings.alerting.evaluation_interval.seconds
            parts.append(OwnPart("alerts", lambda: [self.alerting.render()] if self.alerting else [],
                                 (Job("alerts", interval, self.evaluate_alerts),)))
        return parts

    async def run_job(self, job: Job) -> None:
        with self.health.step(job.name):  # what escapes a run is logged and counted; the job goes on
            after = {layer for layer in job.after if layer not in self.collected_at}
            try:
                await job.run()
            finally:
                job.ran = True
            if job.collects is not None and not after:  # its first collection on fresh inputs
                self.collected_at.setdefault(job.collects, self.wall())
            if job.name in ("service", "infra") and self.exposition.latest is None:
                await self.evaluate_alerts()  # on fresh data, not up to an interval later (serving: after each publish)
            if job.name == "cost":  # cost runs after service and infra: one sample of the page's charts
                self.sample_history()

    async def run_once(self) -> None:
        for job in self.jobs:
            if job.cron is None:  # a daily run is not part of one collection cycle
                await self.run_job(job)
        await self.store_io.drain()  # the history records of this cycle are written

    def metrics_text(self) -> bytes:
        latest = self.exposition.latest
        if latest is not None:  # serving: the background render, never one on the event loop
            return latest.body
        return render_text(self.registry, self.writer)

    async def run_service(self) -> None:
        """`infermon serve`'s service layer: each target on its own cadence (Spreader), and a
        publish tick that assembles the view and renders /metrics in the worker thread."""
        spreader = self.spreader = Spreader(self.service, self.cpu, self.wall)
        # The worker thread holds the GIL for whole parses and renders; the loop waits for it after
        # every socket call, 5 ms each by default. 1 ms keeps /healthz answering in milliseconds.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, 0.001))
        # A full garbage collection stops both threads for its whole walk of the heap (long on a large
        # fleet: docs/performance.md): what is alive after each job of the worker thread is frozen out of
        # those walks (monitor/heap.py). The data replaced on each scrape is freed by refcount.
        self.heap.start()
        if self.service.workers is not None:  # what a parse worker's answer holds, frozen as it is read
            self.service.workers.after_answer = self.heap.tick
        self.health.watch(SCRAPES, spreader.interval)
        try:
            await asyncio.gather(spreader.run(), self._publish_loop(self.service_layer.job))
        finally:
            sys.setswitchinterval(switch)
            self.heap.stop()

    async def _publish_loop(self, job: Job) -> None:
        period = min(self.settings.service.scrape_interval.seconds, self.settings.infra.interval.seconds)
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            with self.health.step(job.name):  # a bug in file_sd handling: the old targets stay, say so
                self.service.refresh_targets()  # file_sd, on the loop: the spreader follows at once
            with self.health.step(job.name):  # a bug in a renderer: keep scraping, keep the last good page
                await self._publish_tick(job)
            await asyncio.sleep(max(0.0, period - (loop.time() - started)))

    async def _publish_tick(self, job: Job) -> None:
        all_seen = self.spreader is not None and self.spreader.all_seen()
        before = self.wall()
        await asyncio.get_running_loop().run_in_executor(self.cpu, self.publish)
        if all_seen and not job.ran:
            job.ran = True  # ready once every target was tried and published
            self.collected_at.setdefault(SERVICE, before)  # rules on its series may run from this page on
        await self.evaluate_alerts()  # on the page just published: fresh data, rendered once

    def publish(self) -> None:
        """Assemble the service view and render /metrics (in the worker thread)."""
        self.service.view = self.service.assemble(self.wall())
        self.exposition.refresh()

    @property
    def ready(self) -> bool:
        return all(job.ran for job in self.jobs if job.cron is None)

    async def status_in_turns(self) -> MonitorStatus:
        """`status()` for `GET /api/v1/status`: its two long parts (each target's row, the
        overview's service rows, long on a large fleet) made on the loop in turns."""
        return self.status(await self.service.status_in_turns(), await overview_in_turns(self))

    def status(self, targets: list[TargetStatus] | None = None, shown: Overview | None = None) -> MonitorStatus:
        """`targets` and `shown`: the service's target rows and the overview, made already."""
        return {
            "version": __version__,
            "started": self.started,
            "uptime_seconds": self.wall() - self.started,
            "ready": self.ready,
            "layers": {name: self.service_layer.status(targets) if layer is self.service_layer else layer.status()
                       for name, layer in self.layers.items()},
            "topology": self.cost.view.topology.as_dict(),
            "config": {"file": str(self.config_path) if self.config_path else None,
                       "last_reload_successful": self.reloads.successful, "last_reload": self.reloads.at,
                       "last_reload_error": self.reloads.error},
            "collectors": [entry.as_dict() for entry in self.health.entries.values()],
            "jobs": [job.as_dict(self.wall()) for job in list(self.health.jobs.values())],
            "recent_events": self.events,
            "alerting": self.alerting.status() if self.alerting else {"enabled": False},
            "event_loop": self.loop_lag.status(),
            "clock": self.wall.status() if isinstance(self.wall, SteadyClock) else {"source": "set"},
            "heap": self.heap.status(),
            "overview": overview(self) if shown is None else shown,  # the page's numbers, `infermon status`'s
        }

    def sample_history(self) -> None:
        if isinstance(self.wall, SteadyClock):
            self.wall.note_step()  # (after each cost run: a step is logged whether or not status is read)
        canary_ttft = [s.last.ttft_seconds for s in self.canary.probes.values() if s.last is not None and s.last.ok]
        self.history.add(self.wall(), headline(self.service.view, self.infra.view, self.cost.view, canary_ttft))

    def reload(self) -> bool:
        """SIGHUP: read the configuration file again. A broken file keeps the running configuration
        and says why; service targets and file_sd take effect at once, other sections at restart."""
        if self.config_path is None:
            return False
        try:
            fresh = load_checked_settings(self.config_path)
        except ConfigError as exc:
            self.reloads.failed(self.wall(), str(exc))
            log.error("configuration reload failed, keeping the running configuration: %s", exc)
            return False
        except Exception as exc:  # a case the loader does not name yet: still a failed reload, said plainly
            self.reloads.failed(self.wall(), f"{self.config_path}: cannot be loaded ({type(exc).__name__})")
            log.exception("configuration reload failed, keeping the running configuration")
            return False
        self.service.reconfigure(fresh.service.targets, fresh.service.file_sd)
        later = [name for name in type(fresh).model_fields if name != "service"
                 and getattr(fresh, name) != getattr(self.settings, name)]
        later += [key for key in ServiceSettings.model_fields if key not in ("targets", "file_sd")
                  and getattr(fresh.service, key) != getattr(self.settings.service, key)]
        self.settings = self.settings.model_copy(update={"service": self.settings.service.model_copy(
            update={"targets": fresh.service.targets, "file_sd": fresh.service.file_sd})})
        self.reloads.succeeded(self.wall())
        log.info("configuration reloaded: %d static target(s), file_sd %s%s", len(fresh.service.targets),
                 fresh.service.file_sd or "none", f"; changed, applied at restart: {', '.join(later)}" if later else "")
        return True

    def views(self) -> Views:
        """What /metrics renders now, for an alert's context."""
        return Views(self.service.view, self.infra.view, self.cost.view.topology, self.quality.view, self.cost.view,
                     history=self.trend_history, at=self.wall())

    async def evaluate_alerts(self) -> None:
        """The rules on what /metrics exports (`monitor.alerting.tick`): after each collection of
        `run_once`, each publish under `infermon serve`, and on the rules' own interval."""
        if self.alert_tick is not None:
            await self.alert_tick()

    def _on_health_change(self, entry: CollectorHealth, state: str) -> None:
        self.store_io.submit(self._record_event, self.wall(), entry.collector, entry.target, state, entry.error)

    def _record_event(self, ts: float, collector: str, target: str, state: str, error: str | None) -> None:
        self.store.record_event(ts, collector, target, state, error)
        self.events = self.store.recent_events(20)

    def collected(self, metric: str, at: float) -> bool:
        """Does a page rendered at `at` hold what the collector behind this metric collected since
        start? Until then a rule on it is held: evaluated on a fresh process's empty view, a restored
        TargetDown would resolve, then fire again with a new startsAt once the target is scraped."""
        definition = CATALOG.get(metric)
        layer = definition.layer if definition else None
        if layer == "canary":
            return self._canary_collected()
        if layer is not None and any(job.collects == layer for job in self.jobs):
            return self.collected_at.get(layer, math.inf) <= at
        return self.ready  # the monitor's own series, the alerting counters, recorded series: all jobs ran

    def _canary_collected(self) -> bool:
        """Every probe ended once, or the longest probe's interval and timeout have passed."""
        probes = self.canary.probes.values()
        waited = max((p.probe.interval.seconds + p.probe.timeout.seconds for p in probes), default=0.0)
        return all(p.last_at is not None for p in probes) or self.wall() - self.started >= waited

    async def flush_baselines(self) -> None:
        await self.store_io.call(self.service.flush_baselines)  # inline on an in-memory store's one connection

    async def post_digest(self) -> list[str]:
        """The weekly digest into the outbox for `history.digest.receivers` (the sender job posts it)."""
        digest = self.settings.history.digest
        queued = await self.store_io.call(queue_digest, self.delivery.outbox, digest.receivers, self.wall(),
                                          digest.timezone, digest_text)
        log.info("weekly digest queued for %s", ", ".join(queued) or "no receiver (each had it)")
        return queued

    async def prune(self) -> None:
        await self.store_io.call(self.store.prune, self.wall() - self.settings.storage.retention.seconds)
        await self.delivery.prune(self.wall() - self.settings.storage.retention.seconds)

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.store_io.close)  # the queued history first
        self.store.close()
        for layer in reversed(self.layers.values()):  # the canary's probes before the service's connections
            await layer.aclose()
        await self.client.aclose()
        self.cpu.shutdown(wait=False, cancel_futures=True)
        if self.service.workers is not None:
            await self.service.workers.aclose()



def load_ruleset(settings: Settings) -> RuleSet | None:
    """The rule files of `alerting.rules_files` (None when alerting is off); ConfigError names a broken one."""
    if not settings.alerting.enabled:
        return None
    try:
        return load_rules(settings.alerting.rules_files)
    except RulesError as exc:
        raise ConfigError(f"alerting.rules_files: {exc}") from None
