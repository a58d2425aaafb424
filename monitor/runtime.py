"""The monitor assembled from settings: collectors as jobs, one health book, one registry.

Kept apart from FastAPI so tests (and `infermon check`) can run collection cycles directly
with an injected HTTP client and clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.core import Metric
from sqlalchemy.exc import SQLAlchemyError

from monitor import __version__
from monitor.alerting.context import Views
from monitor.alerting.delivery import Delivery, render_delivery
from monitor.alerting.embedded import (
    EmbeddedEvaluator,
    StateChanges,
    Transitions,
    registry_samples,
)
from monitor.alerting.explain import Explainer
from monitor.alerting.model import Alert, AlertSink
from monitor.alerting.rules import RulesError, RuleSet, load_rules
from monitor.canary.collector import CanaryCollector
from monitor.canary.render import render_canary
from monitor.catalog import CATALOG, family
from monitor.clock import SteadyClock
from monitor.config import ConfigError, ServiceSettings, Settings, load_settings
from monitor.cost.collector import CostCollector
from monitor.cost.render import render_cost
from monitor.exporter import ExpositionCache, Renderer, TextWriter, make_registry, render_health, render_text
from monitor.health import CollectorHealth, HealthBook
from monitor.heap import AfterEachJob, HeapFreezer
from monitor.infra.collector import InfraCollector, import_pynvml
from monitor.infra.render import render_infra
from monitor.looplag import LoopLagProbe, render_loop_lag
from monitor.quality.layer import QualityLayer
from monitor.quality.render import render_quality
from monitor.scrape import pool_limits
from monitor.service.collector import ServiceCollector
from monitor.service.render import ServiceText, render_objectives, render_service
from monitor.service.schedule import SCRAPES, Spreader, render_schedule
from monitor.service.workers import ParseWorkers
from monitor.store.baseline import BaselineHistory
from monitor.store.quality import QualityStore
from monitor.store.session import Store
from monitor.store.worker import StoreUnavailable, StoreWorker, render_store
from monitor.web.history import History
from monitor.web.overview import headline, overview, overview_in_turns

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


def render_reload(state: ReloadState) -> Iterator[Metric]:
    fam = family("inference_monitor_config_last_reload_successful")
    fam.add_sample(fam.name, {}, 1.0 if state.successful else 0.0)
    yield fam


@dataclass
class Job:
    name: str
    interval_seconds: float
    run: Callable[[], Awaitable[Any]]
    ran: bool = False
    cron: str | None = None  # a cron job (in `timezone`) instead of an interval; not part of readiness
    timezone: str = "UTC"
    # Under `infermon serve`, a job with a loop runs it for its whole life instead of `run` on an interval.
    loop: Callable[[], Awaitable[Any]] | None = None


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
        ruleset = _load_rules(settings)  # first: a bad rule file fails before anything is opened
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
        self.spreader: Spreader | None = None
        workers = settings.service.parse_workers
        self.service = ServiceCollector(settings.service, self.client, self.health, wall,
                                        own_clients=client is None, history=BaselineHistory(self.store.engine),
                                        workers=ParseWorkers(settings.service, workers) if workers else None)
        self.jobs = [Job("service", settings.service.scrape_interval.seconds, self.service.collect,
                         loop=self.run_service)]
        # infra: local GPUs (NVML, or the trace in infra.replay.file) and dcgm-exporter targets
        self.infra = InfraCollector(settings.infra, self.client, self.health, wall, load_nvml)
        self.jobs.append(Job("infra", settings.infra.interval.seconds, self.infra.collect))
        self.jobs.append(Job("retention", 3600.0, self.prune))
        self.jobs.append(Job("baseline_history", 60.0, self.flush_baselines))
        # quality: the daily judge run (cron), and the view of the latest stored runs
        self.quality = QualityLayer(settings.quality, QualityStore(self.store.engine), self.health, wall)
        self.quality.io = self.store_io.call
        self.jobs.append(Job("quality_refresh", settings.quality.refresh_interval.seconds, self.quality.refresh))
        self.jobs.append(Job("quality_retention", 3600.0, self.quality.prune))
        if settings.quality.enabled:
            self.jobs.append(Job("quality_run", 86400.0, self.quality.run, cron=settings.quality.schedule,
                                 timezone=settings.quality.timezone))
        # canary: synthetic users through the OpenAI-compatible API; the job only dispatches due probes
        self.canary = CanaryCollector(settings.canary, self.health, wall, service_view=lambda: self.service.view)
        if settings.canary.probes:
            self.jobs.append(Job("canary", self.canary.tick_seconds, self.canary.dispatch))
        # cost: after service and infra in each run_once, on the service's interval when scheduled
        self.cost = CostCollector(settings, self.service, self.infra, self.health, self.store, wall)
        self.cost.io = self.store_io.call
        self.jobs.append(Job("cost", settings.service.scrape_interval.seconds, self.cost.collect))
        # alerting delivery: the evaluator and POST /api/v1/alertmanager write to the sink (the outbox)
        self.delivery = Delivery(settings.alerting, self.store.engine, self.client, wall, worker=self.store_io)
        self.sink: AlertSink = self.delivery
        self.jobs.append(Job("delivery", 1.0, self.delivery.run_once))
        self.jobs.append(Job("store", settings.storage.check_interval.seconds, self.store_io.probe))
        renderers: list[Renderer] = [
            lambda: render_service(self.service.view),  # first: the exposition renders it apart (skip=1)
            lambda: [render_objectives(self.service.view)],
            lambda: render_infra(self.infra.view),
            lambda: render_health(self.health),
            lambda: render_quality(self.quality.view, wall()),
            lambda: render_reload(self.reloads),
            lambda: render_canary(self.canary),
            lambda: render_cost(self.cost.view),
            lambda: render_schedule(self.spreader),
        ]
        renderers.append(lambda: render_delivery(self.delivery))
        renderers.append(lambda: render_store(self.store_io))
        self.loop_lag = LoopLagProbe()  # its task runs under `infermon serve` (monitor/app.py's lifespan)
        renderers.append(lambda: render_loop_lag(self.loop_lag))
        self.registry = make_registry(renderers)
        self.history = History()  # the overview page's last hour of headline series
        self.writer = TextWriter()
        # alerting: the rule files evaluated in-process on what /metrics exports
        self.transitions: Transitions = transitions or (lambda: self.delivery.recent(50))
        self.alerting: EmbeddedEvaluator | None = None
        if ruleset is not None:
            self.alerting = EmbeddedEvaluator(ruleset, self.store.engine, sink or self.delivery,
                                              settings.alerting.external_url)
            # The registry's exporter holds this very list: the firing counts join /metrics.
            renderers.append(lambda: [self.alerting.render()] if self.alerting else [])
            self.jobs.append(Job("alerts", settings.alerting.evaluation_interval.seconds, self.evaluate_alerts))
        # alert context (#12): the other layers' evidence and a probable cause on each alert as it fires
        self.explainer = Explainer(self.views, settings.alerting.causes)
        if self.alerting is not None:
            self.alerting.explain = self.explainer
            self.alerting.collected = self.collected
        # What /metrics serves under `infermon serve`, and what in-process readers take:
        # `monitor.exposition.latest.body`, rendered once per publish tick in the worker thread.
        # The service layer's families come first on the page: rendered apart, each target's lines
        # kept until it is scraped again (ServiceText), the other layers' through the registry.
        self.service_text = ServiceText()
        self.exposition = ExpositionCache(
            make_registry(renderers, skip=1), wall,
            prefix=lambda writer, out: self.service_text.render(self.service.view, writer, out))

    async def run_job(self, job: Job) -> None:
        with self.health.step(job.name):  # what escapes a run is logged and counted; the job goes on
            after = {layer for layer in _COLLECTED_AFTER.get(job.name, ()) if layer not in self.collected_at}
            try:
                await job.run()
            finally:
                job.ran = True
            if job.name in _LAYER_OF_JOB and not after:  # its first collection on fresh inputs
                self.collected_at.setdefault(_LAYER_OF_JOB[job.name], self.wall())
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
        self.spreader = Spreader(self.service, self.cpu, self.wall)
        # The worker thread holds the GIL for whole parses and renders; the loop waits for it after
        # every socket call, 5 ms each by default. 1 ms keeps /healthz answering in milliseconds.
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, 0.001))
        # A full garbage collection stops both threads for its whole walk of the heap (0.2-0.65 s at
        # 1,000 ten-model targets): what is alive after each job of the worker thread is frozen out of
        # those walks (monitor/heap.py). The data replaced on each scrape is freed by refcount.
        self.heap.start()
        if self.service.workers is not None:  # what a parse worker's answer holds, frozen as it is read
            self.service.workers.after_answer = self.heap.tick
        self.health.watch(SCRAPES, self.spreader.interval)
        try:
            await asyncio.gather(self.spreader.run(), self._publish_loop(self.jobs[0]))
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
            self.collected_at.setdefault("service", before)  # rules on its series may run from this page on
        await self.evaluate_alerts()  # on the page just published: fresh data, rendered once

    def publish(self) -> None:
        """Assemble the service view and render /metrics (in the worker thread)."""
        self.service.view = self.service.assemble(self.wall())
        self.exposition.refresh()

    @property
    def ready(self) -> bool:
        return all(job.ran for job in self.jobs if job.cron is None)

    async def status_in_turns(self) -> dict[str, Any]:
        """`status()` for `GET /api/v1/status`: its two long parts (each target's row, the
        overview's service rows: ~0.5 s at 1,000 ten-model targets) made on the loop in turns."""
        return self.status(await self.service.status_in_turns(), await overview_in_turns(self))

    def status(self, targets: list[dict[str, object]] | None = None,
               shown: dict[str, Any] | None = None) -> dict[str, Any]:
        """`targets` and `shown`: the service's target rows and the overview, made already."""
        return {
            "version": __version__,
            "started": self.started,
            "uptime_seconds": self.wall() - self.started,
            "ready": self.ready,
            "layers": {
                "service": {
                    "scrape_interval_seconds": self.settings.service.scrape_interval.seconds,
                    "windows": [w.text for w in self.settings.service.windows],
                    "last_derivation": self.service.view.ts,
                    "targets": self.service.status() if targets is None else targets,
                    "file_sd": self.service.discovery.status() if self.service.discovery else None,
                    "schedule": self.spreader.status() if self.spreader else None,
                    "shard": shard.model_dump() if (shard := self.service.settings.shard) else None,
                    "parse_workers": workers.status() if (workers := self.service.workers) else None,
                },
                "infra": self.infra.status(),
                "quality": self.quality.status(),
                "canary": self.canary.status(),
                "cost": self.cost.status(),
            },
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
        self.history.add(self.wall(), headline(self.service.view, self.infra.view, self.cost.view))

    def reload(self) -> bool:
        """SIGHUP: read the configuration file again. A broken file keeps the running configuration
        and says why; service targets and file_sd take effect at once, other sections at restart."""
        if self.config_path is None:
            return False
        try:
            fresh = load_settings(self.config_path)
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
        return Views(self.service.view, self.infra.view, self.cost.view.topology, self.quality.view, self.cost.view)

    async def evaluate_alerts(self) -> None:
        """The rules on what /metrics exports: under `infermon serve` the pre-rendered page, read
        back in the worker thread (no second render on the loop); otherwise the registry."""
        if self.alerting is None:
            return
        interval = self.settings.alerting.evaluation_interval.seconds
        slack = min(0.5, 0.05 * interval)
        with self.health.run("alerts"):
            latest = self.exposition.latest
            if latest is None:
                samples, ts = registry_samples(self.registry, self.alerting.metrics), self.wall()
                with self.alerting.lock:
                    alerts = self.alerting.advance(samples, ts, slack)
                    if alerts is None:
                        return  # this instant is evaluated already
                    changes = self.alerting.changes()
            else:  # read back and advanced in the worker thread, off the loop
                loop = asyncio.get_running_loop()
                done = await loop.run_in_executor(self.cpu, self.alerting.advance_page, latest.chunks,
                                                  latest.rendered_at, slack)
                if done is None:
                    return
                alerts, changes = done
        # The transitions and states go to the store thread; a failure there is the store's, not the rules'.
        with contextlib.suppress(StoreUnavailable, SQLAlchemyError):
            await self.store_io.call(self._write_alerts, alerts, changes)

    def _write_alerts(self, alerts: list[Alert], changes: StateChanges) -> None:
        assert self.alerting is not None
        if not self.alerting.write(alerts, changes):
            raise StoreUnavailable("alert transitions or states could not be stored (retried next evaluation)")

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
        if layer is not None and layer in _LAYER_OF_JOB.values():
            return self.collected_at.get(layer, math.inf) <= at
        return self.ready  # the monitor's own series, the alerting counters, recorded series: all jobs ran

    def _canary_collected(self) -> bool:
        """Every probe ended once, or the longest probe's interval and timeout have passed."""
        probes = self.canary.probes.values()
        waited = max((p.probe.interval.seconds + p.probe.timeout.seconds for p in probes), default=0.0)
        return all(p.last_at is not None for p in probes) or self.wall() - self.started >= waited

    async def flush_baselines(self) -> None:
        await self.store_io.call(self.service.flush_baselines)  # inline on an in-memory store's one connection

    async def prune(self) -> None:
        await self.store_io.call(self.store.prune, self.wall() - self.settings.storage.retention.seconds)
        await self.delivery.prune(self.wall() - self.settings.storage.retention.seconds)

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.store_io.close)  # the queued history first
        self.store.close()
        await self.canary.aclose()
        await self.infra.aclose()
        await self.client.aclose()
        await self.service.aclose()
        self.cpu.shutdown(wait=False, cancel_futures=True)
        if self.service.workers is not None:
            await self.service.workers.aclose()


# The layer each job collects; cost derives from service and infra, so its first collection
# counts once theirs are in.
_LAYER_OF_JOB = {"service": "service", "infra": "infra", "quality_refresh": "quality", "cost": "cost"}
_COLLECTED_AFTER = {"cost": ("service", "infra")}


def _load_rules(settings: Settings) -> RuleSet | None:
    if not settings.alerting.enabled:
        return None
    try:
        return load_rules(settings.alerting.rules_files)
    except RulesError as exc:
        raise ConfigError(f"alerting.rules_files: {exc}") from None
