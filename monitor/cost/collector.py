"""The cost layer's job: price the inventory, join it to the service layer, accrue the spend.

Runs after the service and infra collectors (it reads their latest views, no I/O of its own
but one short database write): derives a fresh `CostView` for /metrics and /api/v1/cost, and
brings the persisted totals up to now.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict
from zoneinfo import ZoneInfo

from monitor.config import Settings
from monitor.cost.derive import CostNumbers, SpendHistory, baseline_ratios, derive_costs, split_by_day
from monitor.cost.inventory import InventoryGpu, Pods, build_inventory
from monitor.cost.prices import PriceBook
from monitor.cost.store import CostLedger, Running, SpendPoints
from monitor.health import HealthBook
from monitor.infra.collector import InfraCollector
from monitor.service.collector import ServiceCollector
from monitor.service.view import ServiceView
from monitor.store.session import Store
from monitor.topology import GpuKey, Topology, TopologyMap

log = logging.getLogger("monitor.cost")
COLLECTOR = "cost"
FLEET, IDLE = "fleet", "idle"


@dataclass
class CostView:
    ts: float
    present: bool = False  # False until there is a GPU to price (then nothing is exported)
    numbers: CostNumbers = field(default_factory=CostNumbers)
    topology: TopologyMap = field(default_factory=TopologyMap)
    totals: dict[str, float] = field(default_factory=dict)  # scope -> USD since the first tick
    day: str = ""  # today in cost.timezone
    today: dict[str, float] = field(default_factory=dict)  # "fleet" / "idle" -> USD today
    budget_usd: float | None = None
    unmapped: list[str] = field(default_factory=list)  # service targets without GPUs: no spend or $/token of their own
    # GPUs serving targets -> 1.0 when every engine of every target they serve is asleep (vLLM sleep
    # mode), else 0.0: a sleeping engine's GPU is idle by design (no GPUUtilizationLow for it).
    serving_asleep: dict[GpuKey, float] = field(default_factory=dict)

    @property
    def budget_used_ratio(self) -> float | None:
        if self.budget_usd is None:
            return None
        return self.today.get(FLEET, 0.0) / self.budget_usd


def serving_asleep(topology: TopologyMap, service: ServiceView) -> dict[GpuKey, float]:
    """Per GPU that serves a target: 1.0 when all it serves is asleep. A target is asleep when its
    page has sleep states and no engine of any model is awake; one without them never is."""
    asleep: dict[str, bool] = {}
    for name, target in service.targets.items():
        states = target.labelled.get("sleep_state", {})
        awake = sum(v for per_model in states.values() for k, v in per_model.items() if k == "awake")
        asleep[name] = target.up and bool(states) and awake == 0
    return {gpu: 1.0 if targets and all(asleep.get(t, False) for t in targets) else 0.0
            for gpu, targets in topology.by_gpu.items() if targets}


class CostStatus(TypedDict):
    """/api/v1/status' "layers"."cost"."""

    present: bool
    last_derivation: float
    unpriced_gpus: int


class CostCollector:
    def __init__(self, settings: Settings, service: ServiceCollector, infra: InfraCollector, health: HealthBook,
                 store: Store, wall: Callable[[], float] = time.time) -> None:
        self.settings = settings.cost
        self.service = service
        self.infra = infra
        self.health = health
        self.wall = wall
        self.prices = PriceBook(settings.cost)
        self.topology = Topology(settings.service.targets, settings.infra.node)
        self.zone = ZoneInfo(settings.cost.timezone)
        self.windows = {w.text: w.seconds for w in settings.service.windows}
        self.baseline_seconds = settings.service.baseline_window.seconds
        self.min_coverage = settings.service.baseline_min_coverage
        # Twice the baseline: how far back the history reaches is read beyond the baseline's start.
        self.history = SpendHistory(max(self.windows.values()) + 2 * self.baseline_seconds)
        # ... and kept in the store at a coarse cadence, so that a restart does not blind the baseline.
        self.spend_points = SpendPoints(store.engine)
        self.persist_every = max(settings.service.scrape_interval.seconds, self.baseline_seconds / 60)
        self.persisted_at: float | None = None
        for model, window, ts, spend, generated in self.spend_points.load(wall() - self.history.keep):
            self.history.restore(model, window, ts, spend, generated)
            self.persisted_at = ts
        self.started: float | None = None  # the first tick with GPUs to price
        self.ledger = CostLedger(store.engine)
        self.target_models: dict[str, frozenset[str]] = {}  # last models seen on each target
        self.last_pods: dict[GpuKey, Pods] = {}
        self.warned: set[tuple[str, str, str]] = set()
        self.view = CostView(ts=wall(), budget_usd=settings.cost.daily_budget_usd)
        # Set by the monitor: its store thread (StoreWorker.call); the ledger's writes never wait on the loop.
        self.io: Callable[..., Awaitable[Any]] | None = None

    async def collect(self) -> CostView:
        with self.health.run(COLLECTOR) as entry:
            now = self.wall()
            gpus = build_inventory(self.infra.view, self.settings.static_gpus, self.last_pods)
            if not gpus:
                entry.present = False  # nothing paid for, nothing to say
                self.view = CostView(ts=now, topology=self.topology.resolve(()),
                                     budget_usd=self.settings.daily_budget_usd)
                return self.view
            self.view = self._derive(now, gpus) if self.io is None else await self.io(self._derive, now, gpus)
        return self.view

    def _derive(self, now: float, gpus: list[InventoryGpu]) -> CostView:
        self.last_pods.update({g.key: g.pods for g in gpus if g.up})
        topology = self.topology.resolve(g.seen() for g in gpus)
        for name, target in self.service.view.targets.items():
            models = frozenset(model for model, _ in target.stats)
            if models:
                self.target_models[name] = models
        numbers = derive_costs(gpus, self.prices, topology, self.target_models, self.service.view,
                               self.settings.expensive_factor)
        numbers.baseline_ratio = baseline_ratios(numbers, self.history, now, self.windows, self.baseline_seconds,
                                                 self.min_coverage)
        if self.started is None:
            self.started = now
        added = self.history.add(now, numbers, {label: self.started + s for label, s in self.windows.items()})
        if added and (self.persisted_at is None or now - self.persisted_at >= self.persist_every):
            self.spend_points.save(added, now - self.history.keep)
            self.persisted_at = now
        self._warn_unpriced(numbers)
        day = _day(now, self.zone)
        totals, today = self._accrue(now, numbers, day)
        exported = {FLEET, IDLE, *(f"target:{t}" for t in topology.by_target),
                    *(f"model:{m}" for models in self.target_models.values() for m in models)}
        return CostView(
            ts=now, present=True, numbers=numbers, topology=topology,
            totals={scope: usd for scope, usd in totals.items() if scope in exported},
            day=day, today=today,
            budget_usd=self.settings.daily_budget_usd,
            unmapped=topology.unmapped(t.name for t in self.topology.all_targets),
            serving_asleep=serving_asleep(topology, self.service.view),
        )

    def _warn_unpriced(self, numbers: CostNumbers) -> None:
        for cost in numbers.unpriced:
            key = (cost.gpu.node, cost.gpu.gpu, cost.gpu.model)
            if key not in self.warned:
                self.warned.add(key)
                log.warning("GPU %s/%s (%r) has no price: its spend is not counted; %s",
                            cost.gpu.node, cost.gpu.gpu, cost.gpu.model or "model unknown",
                            self.prices.why_unpriced(cost.gpu.model))

    def _accrue(self, now: float, numbers: CostNumbers, day: str) -> tuple[dict[str, float], dict[str, float]]:
        rates: dict[str, float | None] = {FLEET: numbers.usd_per_hour, IDLE: numbers.idle_usd_per_hour}
        rates.update({f"target:{t}": usd for t, usd in numbers.by_target.items()})
        rates.update({f"model:{m}": usd for m, usd in numbers.by_model.items()})
        return self.ledger.accrue(now, rates, self._spent, frozenset((FLEET, IDLE)), day)

    def _spent(self, scope: str, running: Running, now: float) -> list[tuple[str, float]]:
        """What `scope` spent since its total was last brought up to date, per local day."""
        elapsed = now - running.updated_ts
        if running.usd_per_hour is None or elapsed <= 0:
            return []
        if elapsed > self.settings.max_gap.seconds:
            if scope == FLEET:
                log.warning("cost: %.0f s without a tick (longer than cost.max_gap): that interval's spend is "
                            "not counted", elapsed)
            return []
        rate = running.usd_per_hour
        return [(day, rate * seconds / 3600.0) for day, seconds in split_by_day(running.updated_ts, now, self.zone)]

    def status(self) -> CostStatus:
        return {"present": self.view.present, "last_derivation": self.view.ts,
                "unpriced_gpus": len(self.view.numbers.unpriced)}


def _day(ts: float, zone: ZoneInfo) -> str:
    return split_by_day(ts, ts + 1, zone)[0][0]
