"""The infra layer's job: read local GPUs (NVML or a replayed trace) and scrape dcgm-exporters.

One run reads every source concurrently, each under its own deadline, then publishes a fresh
`InfraView` that /metrics renders without I/O.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypedDict

import httpx

from monitor.config import InfraSettings, Target
from monitor.health import HealthBook
from monitor.infra.dcgm import WANTED, page_to_states
from monitor.infra.ledger import ErrorLedger
from monitor.infra.local import COLLECTOR, LocalGpus, LocalStatus
from monitor.infra.nvml import NvmlBackend
from monitor.infra.reading import GpuIdentity, GpuReading, GpuState, InfraView, NotPresent
from monitor.infra.replay import ReplayNvml, load_trace
from monitor.promtext import PageError, Parser
from monitor.redaction import redact_urls, safe_url
from monitor.scrape import ScrapeError, fetch_page

MAX_DCGM_PAGE_BYTES = 20_000_000  # 64 GPUs with every field enabled stay far below this


def import_pynvml() -> Any:
    return importlib.import_module("pynvml")


class _Unavailable:
    """The backend when pynvml itself cannot be imported: "not present" on every open."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def open(self) -> list[GpuIdentity]:
        raise NotPresent(self.reason)

    def read(self, index: int) -> GpuReading:
        raise NotPresent(self.reason)

    def close(self) -> None:
        pass


def local_gpus(settings: InfraSettings, health: HealthBook, load_nvml: Callable[[], Any],
               clock: Callable[[], float]) -> LocalGpus | None:
    """The local GPU source the config asks for: a replayed trace, NVML, or none."""
    timeout = settings.timeout.seconds
    if settings.replay.file is not None:
        replay = ReplayNvml(load_trace(settings.replay.file), clock)
        return LocalGpus(NvmlBackend(replay, clock), settings.node, health, timeout, "replay", required=True)
    if settings.nvml.enabled == "false":
        return None
    try:
        backend: Any = NvmlBackend(load_nvml(), clock)
    except ImportError as exc:
        backend = _Unavailable(f"pynvml cannot be imported: {exc}")
    return LocalGpus(backend, settings.node, health, timeout, "nvml", required=settings.nvml.enabled == "true")


@dataclass
class DcgmTarget:
    target: Target
    parser: Parser = field(default_factory=Parser)
    known: list[GpuState] = field(default_factory=list)  # what the last good scrape showed
    last_scrape: float | None = None
    error: str | None = None


class DcgmTargetStatus(TypedDict):
    name: str
    url: str  # without credentials
    last_scrape: float | None
    up: bool
    error: str | None
    gpus: int


class GpuStatus(TypedDict):
    node: str
    gpu: str
    source: str
    up: bool
    error: str | None
    uuid: str | None
    model: str | None


class InfraStatus(TypedDict):
    """/api/v1/status' "layers"."infra"."""

    interval_seconds: float
    node: str
    local: LocalStatus | None  # NVML or the replayed trace (None: off)
    dcgm_targets: list[DcgmTargetStatus]
    gpus: list[GpuStatus]


class InfraCollector:
    def __init__(
        self,
        settings: InfraSettings,
        client: httpx.AsyncClient,
        health: HealthBook,
        wall: Callable[[], float] = time.time,
        load_nvml: Callable[[], Any] = import_pynvml,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.client = client
        self.health = health
        self.wall = wall
        self.local = local_gpus(settings, health, load_nvml, clock)
        self.dcgm = [DcgmTarget(t) for t in settings.dcgm.targets]
        self.ledger = ErrorLedger()  # XIDs and error counters across ticks, on the monitor's wall clock
        self.view = InfraView(ts=wall())

    async def collect(self) -> InfraView:
        local = self.local.collect() if self.local is not None else _nothing()
        parts = await asyncio.gather(local, *(self._scrape(target) for target in self.dcgm))
        states = self.ledger.update([state for part in parts for state in part], self.wall())
        self.view = InfraView(self.wall(), tuple(states))
        return self.view

    async def _scrape(self, state: DcgmTarget) -> list[GpuState]:
        name = state.target.name
        with self.health.run(COLLECTOR, name):
            state.last_scrape = self.wall()
            try:
                fetched = await fetch_page(self.client, state.target.url, self.settings.timeout.seconds,
                                           MAX_DCGM_PAGE_BYTES)
                page = state.parser.parse(fetched.text, WANTED, fetched.openmetrics)
            except (ScrapeError, PageError) as exc:
                state.error = str(exc)
                raise
            state.known, state.error = _with_vanished(page_to_states(page, name), state.known), None
            return state.known
        # The scrape failed: the GPUs it showed last time are down, not frozen at old values.
        return [_down(g, state.error) for g in state.known]

    def status(self) -> InfraStatus:
        return {
            "interval_seconds": self.settings.interval.seconds,
            "node": self.settings.node,
            "local": self.local.status() if self.local is not None else None,
            "dcgm_targets": [
                {"name": t.target.name, "url": safe_url(t.target.url), "last_scrape": t.last_scrape,
                 "up": t.error is None and t.last_scrape is not None,
                 "error": redact_urls(t.error) if t.error else None, "gpus": len(t.known)}
                for t in self.dcgm
            ],
            "gpus": [
                {"node": g.node, "gpu": g.gpu, "source": g.source, "up": g.up, "error": g.error,
                 "uuid": g.identity.uuid if g.identity else None, "model": g.identity.model if g.identity else None}
                for g in self.view.gpus
            ],
        }

    async def aclose(self) -> None:
        if self.local is not None:
            await self.local.aclose()


def _down(gpu: GpuState, error: str | None) -> GpuState:
    return GpuState(gpu.node, gpu.gpu, gpu.source, up=False, identity=gpu.identity, error=error)


def _with_vanished(current: list[GpuState], known: list[GpuState]) -> list[GpuState]:
    # dcgm-exporter stops listing a GPU that fell off the bus: it stays, as down, until restart.
    seen = {(g.node, g.gpu) for g in current}
    gone = [_down(g, "no longer on the exporter's page") for g in known if (g.node, g.gpu) not in seen]
    return current + gone


async def _nothing() -> list[GpuState]:
    return []
