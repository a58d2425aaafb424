"""What the GPUs and the engine did during one measured window, read by the monitor's own layers.

GPUs: the infra layer's NVML backend (real NVML, or the recorded H200 trace through
`ReplayNvml`), or one dcgm-exporter page, read every `interval_s` from the window's start to its
end. Energy is the difference of NVML's total-energy counter between the window's first and last
reading (all GPUs summed); a source without the counter integrates power over time instead.

Every page (dcgm-exporter's, the engine's) is read with one deadline for the whole exchange and
a byte cap (`monitor.scrape.fetch_page`; the defaults are the conditions probes').

Engine: its /metrics page scraped at the window's start and end; the service layer's derivation
(`window_rates` + `stats_from_rates`, the PromQL the monitor exports) turns the two scrapes into
the engine's own TTFT / queue-time quantiles, preemptions and token counts for the same window.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from monitor.infra.collector import import_pynvml
from monitor.infra.dcgm import WANTED, page_to_states
from monitor.infra.ledger import gpu_health
from monitor.infra.nvml import NvmlBackend
from monitor.infra.reading import GpuIdentity, GpuReading, GpuState, NotPresent
from monitor.infra.replay import ReplayNvml, load_trace
from monitor.loadtest.conditions import MODELS_KEPT, PROBE_MAX_BYTES, PROBE_TIMEOUT_S, cut
from monitor.promtext import Parser, check_text
from monitor.scrape import ScrapeError, fetch_page
from monitor.service.derive import Objectives, Window, WindowStats, stats_from_rates, window_rates
from monitor.service.engines import EngineSpec, detect
from monitor.service.extract import Snapshot, extract
from monitor.service.series import SeriesStore


class GpuSource(Protocol):
    name: str  # "nvml" | "replay" | "dcgm"

    async def identify(self) -> dict[str, Any]:
        """Model, count, driver, CUDA, memory: for the conditions block."""
        ...

    async def read(self) -> list[GpuReading]: ...

    async def aclose(self) -> None: ...


class NvmlSource:
    """Local GPUs through the infra layer's `NvmlBackend` (a real pynvml or a replayed trace)."""

    def __init__(self, nvml: Any, name: str = "nvml", clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.nvml = nvml
        # Energy on every read (the infra layer reads it every 30 s: it is NVML's slowest read,
        # docs/performance.md).
        self.backend = NvmlBackend(nvml, clock, slow_interval_s=0.0)
        self.gpus: list[GpuIdentity] = []

    async def identify(self) -> dict[str, Any]:
        self.gpus = await asyncio.to_thread(self.backend.open)
        readings = await self.read()
        states = [GpuState("local", str(g.index), self.name, True, g, r)
                  for g, r in zip(self.gpus, readings, strict=True)]
        return gpu_conditions(self.name, [g.model for g in self.gpus], self.gpus[0].driver if self.gpus else None,
                              self._cuda(), [r.memory_total_bytes for r in readings], health_conditions(states))

    def _cuda(self) -> str | None:
        # 12040 -> "12.4"; a replay (or an old binding) has no such call: not observed.
        try:
            version = int(self.nvml.nvmlSystemGetCudaDriverVersion())
        except (AttributeError, TypeError, ValueError, self.nvml.NVMLError):
            return None
        return f"{version // 1000}.{version % 1000 // 10}"

    async def read(self) -> list[GpuReading]:
        return await asyncio.to_thread(lambda: [self.backend.read(g.index) for g in self.gpus])

    async def aclose(self) -> None:
        await asyncio.to_thread(self.backend.close)


class DcgmSource:
    """One dcgm-exporter page (its URL), read like the infra layer reads it."""

    name = "dcgm"

    def __init__(self, url: str, http: httpx.AsyncClient, timeout_s: float = PROBE_TIMEOUT_S,
                 max_bytes: int = PROBE_MAX_BYTES) -> None:
        self.url, self.http, self.timeout_s, self.max_bytes = url, http, timeout_s, max_bytes
        self.parser = Parser()

    async def _states(self) -> list[Any]:
        page = await fetch_page(self.http, self.url, self.timeout_s, self.max_bytes)
        return page_to_states(self.parser.parse(page.text, WANTED), "dcgm")

    async def identify(self) -> dict[str, Any]:
        states = [s for s in await self._states() if s.identity is not None]
        driver = states[0].identity.driver if states and states[0].identity else None
        return gpu_conditions("dcgm", [s.identity.model for s in states if s.identity], driver or None, None,
                              [s.reading.memory_total_bytes if s.reading else None for s in states],
                              health_conditions(states))

    async def read(self) -> list[GpuReading]:
        return [s.reading for s in await self._states() if s.reading is not None]

    async def aclose(self) -> None:
        pass


def gpu_conditions(source: str, models: list[str], driver: str | None, cuda: str | None,
                   memory: list[float | None], health: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"source": source, "model": cut(models[0]) if models else None, "count": len(models),
            "models": [cut(m) for m in sorted(set(models))[:MODELS_KEPT]], "driver": cut(driver), "cuda": cuda,
            "memory_total_bytes": memory[0] if memory else None, **(health or {})}


def health_conditions(states: list[GpuState]) -> dict[str, Any]:
    """The GPUs' health when the run began (the infra layer's verdict: monitor/infra/ledger.py): the
    worst of "ok", "warning" (reset when convenient), "critical" (drain), and why, per GPU. None
    when no GPU reports a health field (not known, rather than ok)."""
    found = [(state.gpu, verdict) for state in states if (verdict := gpu_health(state)) is not None]
    if not found:
        return {"health": None, "health_reasons": []}
    order = ("ok", "warning", "critical")
    worst = max((verdict[0] for _, verdict in found), key=order.index)
    reasons = [f"GPU {gpu}: {', '.join(verdict[1])}" for gpu, verdict in found if verdict[1]]
    return {"health": worst, "health_reasons": [cut(r) for r in reasons[:MODELS_KEPT]]}


def local_source(replay_file: str | None, replay_count: int = 1) -> NvmlSource | None:
    """The replayed trace when given, else NVML when this host has it, else None (not observed)."""
    if replay_file is not None:
        return NvmlSource(ReplayNvml(load_trace(replay_file), count=replay_count), "replay")
    try:
        return NvmlSource(import_pynvml())
    except ImportError:
        return None


async def open_source(source: GpuSource | None) -> tuple[GpuSource | None, dict[str, Any]]:
    """Identify the GPUs; a host without NVML is "not observed", not an error."""
    if source is None:
        return None, {"source": None}
    try:
        return source, await source.identify()
    except NotPresent as exc:
        return None, {"source": None, "error": str(exc)}
    except ScrapeError as exc:
        return None, {"source": source.name, "error": str(exc)}
    except (httpx.HTTPError, OSError) as exc:
        return None, {"source": source.name, "error": f"{type(exc).__name__}: {exc}"}


@dataclass
class GpuWindow:
    """Readings of one window: (seconds since its start, one reading per GPU)."""

    readings: list[tuple[float, list[GpuReading]]] = field(default_factory=list)
    errors: int = 0

    def figures(self, output_tokens: int) -> dict[str, Any]:
        if not self.readings:
            return {}
        utilization = [r.utilization_ratio for _, rs in self.readings for r in rs if r.utilization_ratio is not None]
        memory = [sum(r.memory_used_bytes or 0.0 for r in rs) for _, rs in self.readings]
        power = [sum(r.power_watts for r in rs if r.power_watts is not None) for _, rs in self.readings]
        energy, energy_from = self._energy()
        return {
            "utilization_ratio": statistics.fmean(utilization) if utilization else None,
            "memory_used_bytes": max(memory) if memory else None,
            "power_watts": statistics.fmean(power) if power else None,
            "energy_joules": energy,
            "energy_from": energy_from,
            "joules_per_output_token": energy / output_tokens if energy is not None and output_tokens else None,
            "readings": len(self.readings),
        }

    def _energy(self) -> tuple[float | None, str | None]:
        (t0, first), (t1, last) = self.readings[0], self.readings[-1]
        starts = [r.energy_joules for r in first]
        ends = [r.energy_joules for r in last]
        if len(first) == len(last) and all(v is not None for v in starts + ends) and t1 > t0:
            return sum(e - s for s, e in zip(starts, ends, strict=True) if s is not None and e is not None), "counter"
        points = [(t, sum(r.power_watts or 0.0 for r in rs)) for t, rs in self.readings]
        if len(points) < 2:
            return None, None
        # Trapezoids between readings: watts x seconds.
        joules = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(points))
        return joules, "power"


class GpuSampler:
    """Reads `source` every `interval_s` while a window runs."""

    def __init__(self, source: GpuSource, interval_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        self.source, self.interval_s, self.clock = source, interval_s, clock

    @contextlib.asynccontextmanager
    async def window(self) -> Any:
        window = GpuWindow()
        started = self.clock()
        await self._read(window, started)
        task = asyncio.create_task(self._loop(window, started))
        try:
            yield window
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await self._read(window, started)

    async def _loop(self, window: GpuWindow, started: float) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._read(window, started)

    async def _read(self, window: GpuWindow, started: float) -> None:
        try:
            readings = await self.source.read()
        except Exception:  # a lost GPU or a failed scrape: counted, the run goes on
            window.errors += 1
            return
        window.readings.append((self.clock() - started, readings))


class EnginePage:
    """The target's engine page: detection for the conditions, two scrapes per window."""

    def __init__(self, url: str, http: httpx.AsyncClient, model: str, clock: Callable[[], float] = time.time,
                 timeout_s: float = PROBE_TIMEOUT_S, max_bytes: int = PROBE_MAX_BYTES) -> None:
        self.url, self.http, self.model, self.clock = url, http, model, clock
        self.timeout_s, self.max_bytes = timeout_s, max_bytes
        self.spec: EngineSpec | None = None
        self.text: str | None = None
        self.error: str | None = None

    async def scrape(self) -> Snapshot | None:
        try:
            text = (await fetch_page(self.http, self.url, self.timeout_s, self.max_bytes)).text
            check_text(text)
        except ScrapeError as exc:
            self.error = str(exc)
            return None
        except (httpx.HTTPError, ValueError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return None
        self.text, self.spec = text, detect(text)
        if self.spec is None:
            self.error = "no known engine's metrics on the page"
            return None
        return extract(Parser().parse(text, self.spec.page_names()), self.spec, self.clock(), self.model)


    @contextlib.asynccontextmanager
    async def window(self, interval_s: float = 0.5) -> Any:
        """Scrapes at the start, every `interval_s` (for the gauges: running, waiting, KV cache) and
        at the end, after the last answer."""
        window = EngineWindow(await self.scrape())
        task = asyncio.create_task(self._poll(window, interval_s))
        try:
            yield window
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            window.last = await self.scrape()

    async def _poll(self, window: EngineWindow, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            snap = await self.scrape()
            if snap is not None:
                window.gauges.append({k: _of_model(v, self.model) for k, v in snap.gauges.items()})


def _of_model(values: dict[str, float], model: str) -> float | None:
    return values.get(model, max(values.values(), default=None))


@dataclass
class EngineWindow:
    first: Snapshot | None
    last: Snapshot | None = None
    gauges: list[dict[str, float | None]] = field(default_factory=list)  # the polls during the load

    def figures(self, objectives: Objectives, model: str) -> dict[str, Any]:
        out = engine_figures(self.first, self.last, objectives, model)
        for gauge in ("running", "waiting", "kv_cache"):
            values = [v for g in self.gauges if (v := g.get(gauge)) is not None]
            name = "kv_cache_usage_ratio" if gauge == "kv_cache" else f"requests_{gauge}"
            out[name] = {"mean": statistics.fmean(values), "max": max(values)} if values else None
        return out


def engine_figures(start: Snapshot | None, end: Snapshot | None, objectives: Objectives,
                   model: str) -> dict[str, Any]:
    """The engine's own numbers over (start, end]: the service layer's derivation on two scrapes."""
    if start is None or end is None or end.ts <= start.ts:
        return {}
    store = SeriesStore(retention_seconds=3600.0)
    store.append(start)
    store.append(end)
    seconds = end.ts - start.ts
    # A little wider than the scrapes' distance: the left-open range must hold the first scrape even
    # after both ends are rounded to milliseconds. rate() extrapolates over the margin, so rate x
    # seconds is the increase between the scrapes, short by at most 2 ms / window for a series
    # that starts at 0 (Prometheus does not extrapolate a counter below zero).
    per_model = window_rates(store, end.ts, Window("bench", seconds + 0.002))
    rates = per_model.get(model) or (next(iter(per_model.values())) if len(per_model) == 1 else None)
    if rates is None:
        return {}
    stats = stats_from_rates(rates, objectives)
    quantiles = {metric: {f"p{round(q * 100)}": v for q, v in values.items()}
                 for metric, values in stats.quantiles.items()}
    return {
        "requests": _times(stats.requests_per_second, seconds),
        "generation_tokens": _times(stats.generation_tokens_per_second, seconds),
        "prompt_tokens": _times(stats.prompt_tokens_per_second, seconds),
        "preemptions": _times(stats.preemptions_per_second, seconds),
        "ttft_s": quantiles.get("ttft", {}),
        "queue_s": quantiles.get("queue", {}),
        "tpot_s": quantiles.get("tpot", {}),
        # prompt tokens the engine found in its prefix cache / looked up: a cached benchmark says so
        "prefix_cache_hit_ratio": stats.prefix_cache_hit_ratio,
        # {"queue_s": 0.3}: the histograms whose every observation of the window fell in the first
        # bucket, and its bound (the service layer's `below_first_bound`): a reader shows "< 300 ms"
        "below_first_bound_s": {f"{metric}_s": bound for metric, bound in stats.below_first_bound.items()
                                if metric in ("ttft", "queue", "tpot")},
        **serving_figures(stats, quantiles, seconds),
    }


def serving_figures(stats: WindowStats, quantiles: dict[str, dict[str, float]], seconds: float) -> dict[str, Any]:
    """The serving shapes' numbers for the window, where the page has them (the operators' hypotheses,
    monitor.loadtest.hypotheses): per KV tier the swap-back (load) and swap-out (store) quantiles and
    the tier's rates and ratios; the P/D transfer's quantiles, share of TTFT and failures; the MoE
    experts' mean balancedness."""
    tiers: dict[str, dict[str, Any]] = {tier: dict(numbers) for tier, numbers in stats.kv_tiers.items()}
    for metric, values in quantiles.items():
        kind, slash, tier = metric.partition("/")
        if slash and kind in ("kv_load", "kv_store"):
            tiers.setdefault(tier, {})[f"{kind.removeprefix('kv_')}_s"] = values
    out: dict[str, Any] = {}
    if tiers:
        out["kv_tiers"] = tiers
    if "pd_transfer" in quantiles or stats.pd_transfer_failures_per_second is not None:
        out["pd"] = {"transfer_s": quantiles.get("pd_transfer", {}),
                     "transfer_ttft_share_ratio": stats.pd_transfer_ttft_share_ratio,
                     "transfer_failures": _times(stats.pd_transfer_failures_per_second, seconds)}
    if stats.moe_expert_balancedness_ratio is not None:
        out["moe_balancedness_ratio"] = stats.moe_expert_balancedness_ratio
    if stats.external_prefix_cache_hit_ratio is not None:
        out["external_prefix_cache_hit_ratio"] = stats.external_prefix_cache_hit_ratio
    return out


def _times(rate: float | None, seconds: float) -> float | None:
    return None if rate is None else rate * seconds
