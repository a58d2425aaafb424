"""One benchmark run: conditions, warm-up, then every level `repeats` times, each window measured
together with the GPUs and the engine page; the result is a plain dict (result.py writes it).

    for each repeat:  for each level:  [GPU sampler + engine scrapes]  load for --duration
                                        (A/B: each target's window in turn, A B then B A)
    --capacity:       one window at each level the search asks for (capacity.py)

A warm-up or window in which every request failed ends its target's run there (`stopped`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from monitor.cost.derive import usd_per_million_tokens
from monitor.cost.prices import PriceBook, Quote
from monitor.loadtest import SCHEMA_VERSION
from monitor.loadtest.bounded import ERROR_BYTES, EVENT_BYTES, RESPONSE_FLOOR_BYTES, Caps
from monitor.loadtest.capacity import CapacitySearch, answer
from monitor.loadtest.client import ClientMeter
from monitor.loadtest.conditions import PROBE_MAX_BYTES, PROBE_TIMEOUT_S, server_conditions, tool_conditions
from monitor.loadtest.data import Dataset, Request, draw_requests, length_stats
from monitor.loadtest.load import Level, LoadRunner, Progress, make_sender
from monitor.loadtest.sampling import EnginePage, GpuSampler, GpuSource, open_source
from monitor.loadtest.scenario import Scenario
from monitor.loadtest.stats import Goodput, Sample, ServedLengths, over_repeats, window_figures
from monitor.loadtest.tokenizer import TOKENIZE_SAMPLE, exact_input_lengths
from monitor.redaction import safe_url
from monitor.service.derive import Objectives

TTFT_SAMPLES_KEPT = 5000  # per level, for the report's distribution (all repeats together)
FAILURE_REASONS = 3  # distinct reasons kept per failed outcome and window
LENGTH_SAMPLE = 1000  # generated requests the length statistics are taken over (each is made on demand)
ASKED_FROM = {"input_tokens": "estimated: 4 characters a token", "output_tokens": "asked: max_tokens"}


@dataclass
class BenchConfig:
    target: str  # the server's base URL (http://host:8000), with or without /v1
    model: str
    scenario: Scenario
    dataset: Dataset
    levels: list[Level]
    duration_s: float = 300.0
    repeats: int = 3
    warmup: int = 100
    seed: int = 0
    goodput: Goodput = field(default_factory=Goodput)
    timeout_s: float = 600.0  # one request's whole deadline, connect to last token
    max_response_bytes: int | None = None  # one answer's cap; None: bounded.response_limit of its max_tokens
    max_event_bytes: int = EVENT_BYTES  # one SSE event's
    max_error_bytes: int = ERROR_BYTES  # what is read of an error answer's body
    probe_timeout_s: float = PROBE_TIMEOUT_S  # each conditions probe and engine/dcgm page, whole exchange
    probe_max_bytes: int = PROBE_MAX_BYTES
    api_key: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    precision: str | None = None
    note: str | None = None
    sample_interval_s: float = 0.5
    gpu_price_usd_per_hour: float | None = None  # per GPU; else the price book's
    stop_when_all_fail: bool = True  # a warm-up or window in which every request failed ends the run
    tokenize: bool = True  # count the input lengths with the engine's tokenizer where it has an endpoint
    client: str = "stream"  # the load's HTTP client: "stream" (the bench's own, stream.py) or "openai" (the SDK)

    @property
    def base(self) -> str:
        return self.target.rstrip("/").removesuffix("/v1")


async def run_bench(config: BenchConfig, gpus: GpuSource | None, prices: PriceBook,
                    progress: Progress | None = None) -> dict[str, Any]:
    return (await run_interleaved([config], gpus, prices, progress))[0]


async def run_interleaved(configs: Sequence[BenchConfig], gpus: GpuSource | None, prices: PriceBook,
                          progress: Progress | None = None) -> list[dict[str, Any]]:
    """One result per config (target), their windows run alternately in one session: for every
    repeat and level, A's window then B's (B then A on the next repeat, so a drift of the machine
    over the session weighs on both alike). One config: an ordinary run."""
    async with httpx.AsyncClient(timeout=10.0) as http:
        gpus, gpu_conditions = await open_source(gpus)
        sessions = [_Session(config, progress) for config in configs]
        try:
            for session in sessions:
                await session.open(http, prices, gpu_conditions)
            for session in sessions:
                await session.warmup()
            for repeat in range(max(c.repeats for c in configs)):
                for i in range(max(len(c.levels) for c in configs)):
                    for session in sessions if repeat % 2 == 0 else sessions[::-1]:
                        await session.window(repeat, i, gpus)
        finally:
            for session in sessions:
                await session.close()
            if gpus is not None:
                await gpus.aclose()
    return [session.result(gpu_conditions) for session in sessions]


async def run_capacity(config: BenchConfig, search: CapacitySearch, gpus: GpuSource | None, prices: PriceBook,
                       progress: Progress | None = None) -> dict[str, Any]:
    """The levels `search` asks for, one window each, after one warm-up at its lower bound; the
    result holds every level measured (by concurrency) and a "capacity" block in words."""
    config = dataclasses.replace(config, levels=[Level("concurrency", search.low)], repeats=1)
    async with httpx.AsyncClient(timeout=10.0) as http:
        gpus, gpu_conditions = await open_source(gpus)
        session = _Session(config, progress)
        try:
            await session.open(http, prices, gpu_conditions)
            await session.warmup()
            config.stop_when_all_fail = False  # past the warm-up, a level that fails entirely is the search's to judge
            while session.stopped is None and (concurrency := search.next_level()) is not None:
                search.record(concurrency, await session.probe(Level("concurrency", concurrency), gpus))
        finally:
            await session.close()
            if gpus is not None:
                await gpus.aclose()
    result = session.result(gpu_conditions)
    result["levels"].sort(key=lambda level: level["level"]["value"])
    result["capacity"] = answer(search, result["conditions"]["workload"]["goodput"], gpu_conditions)
    return result


class _Session:
    """One target's side of a run: its client and engine page, its conditions, its windows."""

    def __init__(self, config: BenchConfig, progress: Progress | None) -> None:
        self.config, self.progress = config, progress
        self.per_level = max(1, round(config.duration_s * 50))  # enough requests drawn not to cycle soon
        self.requests = draw_requests(config.dataset, config.scenario, config.warmup + self.per_level, config.seed)
        caps = Caps(config.max_response_bytes or RESPONSE_FLOOR_BYTES, config.max_event_bytes,
                    config.max_error_bytes)
        self.sender, self.client_note = make_sender(config.client, f"{config.base}/v1", config.api_key,
                                                    config.timeout_s, caps, config.extra_body)
        self.windows: list[list[dict[str, Any]]] = [[] for _ in config.levels]
        self.ttfts: list[list[float]] = [[] for _ in config.levels]
        self.warm: list[Sample] = []
        self.served = ServedLengths()  # every measured window's requests, as the server counted them
        self.exact: dict[str, Any] | None = None  # the input lengths by the engine's tokenizer, before the load
        self.stopped: str | None = None
        self.server: dict[str, Any] = {}

    async def open(self, http: httpx.AsyncClient, prices: PriceBook, gpu_conditions: dict[str, Any]) -> None:
        config = self.config
        self.engine = EnginePage(f"{config.base}/metrics", http, config.model, timeout_s=config.probe_timeout_s,
                                 max_bytes=config.probe_max_bytes)
        await self.engine.scrape()
        spec = self.engine.spec
        self.server = await server_conditions(http, config.base, self.engine.text, spec.engine if spec else None,
                                              spec.generation if spec else None, timeout_s=config.probe_timeout_s,
                                              max_bytes=config.probe_max_bytes, page_error=self.engine.error)
        self.quote = _price(prices, gpu_conditions, config.gpu_price_usd_per_hour)
        if config.tokenize:
            self.exact = await exact_input_lengths(
                http, config.base, config.model, spec.engine if spec else None,
                self.requests[config.warmup:config.warmup + TOKENIZE_SAMPLE], timeout_s=config.probe_timeout_s,
                max_bytes=config.probe_max_bytes, api_key=config.api_key)
        self.runner = LoadRunner(self.sender, config.model, self.requests, seed=config.seed, progress=self.progress,
                                 max_response_bytes=config.max_response_bytes)

    async def warmup(self) -> None:
        self.warm = await self.runner.warmup(self.config.warmup, self.config.levels[0])
        if self.config.stop_when_all_fail:
            self.stopped = _all_failed("the warm-up", self.warm)

    async def window(self, repeat: int, i: int, gpus: GpuSource | None) -> None:
        config = self.config
        if self.stopped is not None or repeat >= config.repeats or i >= len(config.levels):
            return
        level = config.levels[i]
        figures, samples = await _window(config, self.runner, level, gpus, self.engine, self.quote)
        self.windows[i].append(figures)
        self.ttfts[i].extend(s.ttft_s for s in samples if s.ok and s.ttft_s is not None)
        self.served.add(samples)
        if config.stop_when_all_fail:
            self.stopped = _all_failed(f"{level.label} run {repeat + 1}", samples)

    async def probe(self, level: Level, gpus: GpuSource | None) -> dict[str, Any]:
        """One window at `level` (a search's): added to the levels when it is new."""
        if level not in self.config.levels:
            self.config.levels.append(level)
            self.windows.append([])
            self.ttfts.append([])
        await self.window(0, self.config.levels.index(level), gpus)
        return self.windows[self.config.levels.index(level)][-1]

    async def close(self) -> None:
        await self.sender.close()

    def result(self, gpu_conditions: dict[str, Any]) -> dict[str, Any]:
        config, quote = self.config, getattr(self, "quote", None)
        conditions = {
            "workload": {"scenario": config.scenario.describe(), "dataset": config.dataset.describe(),
                         # asked: what the run sent, by the client's estimate; served: what the server counted
                         "lengths": _lengths(self.requests, config, self.per_level), "lengths_from": ASKED_FROM,
                         "served": self.served.figures(), "lengths_exact": self.exact,
                         "levels": [_level(lv) for lv in config.levels], "duration_s": config.duration_s,
                         "repeats": config.repeats, "warmup_requests": config.warmup, "seed": config.seed,
                         "goodput": dataclasses.asdict(config.goodput)},
            "gpu": gpu_conditions,
            "server": self.server,
            "user": {"precision": config.precision, "note": config.note},
            "price": quote.as_dict() if quote is not None else None,
            "tool": {**tool_conditions(), "client": self.sender.name, "client_note": self.client_note},
        }
        return {
            "schema": "infermon-bench",
            "schema_version": SCHEMA_VERSION,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "target": safe_url(config.base),
            "model": config.model,
            "synthetic": config.dataset.source == "synthetic",
            "warmup": {"requests": len(self.warm), "failed": sum(1 for s in self.warm if not s.ok), "excluded": True},
            "stopped": self.stopped,  # a warm-up or window in which every request failed: the run ended there, why
            "conditions": conditions,
            "levels": [{"level": _level(level), "repeats": self.windows[i], "summary": over_repeats(self.windows[i]),
                        "ttft_samples_s": self.ttfts[i][:TTFT_SAMPLES_KEPT]} for i, level in enumerate(config.levels)],
        }


async def _window(config: BenchConfig, runner: LoadRunner, level: Level, gpus: GpuSource | None,
                  engine: EnginePage, quote: Quote | None) -> tuple[dict[str, Any], list[Any]]:
    objectives = Objectives(config.goodput.ttft_s, config.goodput.tpot_s)
    meter = ClientMeter()
    start, started = meter.mark(), dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    async with engine.window(config.sample_interval_s) as seen:
        if gpus is not None:
            async with GpuSampler(gpus, config.sample_interval_s).window() as gpu_window:
                samples, wall_s = await runner.measure(level, config.duration_s)
        else:
            gpu_window, (samples, wall_s) = None, await runner.measure(level, config.duration_s)
    end = meter.mark()
    figures = window_figures(samples, wall_s, config.goodput)
    figures["client"] = meter.figures(start, end, len(samples), wall_s)
    figures["started"] = started  # when the window began (an A/B run's windows interleave)
    figures["gpu"] = gpu_window.figures(figures["output_tokens"]) if gpu_window is not None else {}
    figures["engine"] = seen.figures(objectives, config.model)
    figures["cost"] = _cost(quote, figures)
    figures["outcomes"] = {o: sum(1 for s in samples if s.outcome == o) for o in sorted({s.outcome for s in samples})}
    # why the failures failed, not only how many: up to FAILURE_REASONS distinct reasons an outcome
    figures["failure_reasons"] = {o: sorted({s.detail for s in samples if s.outcome == o})[:FAILURE_REASONS]
                                  for o in figures["outcomes"] if o != "ok"}
    return figures, samples


def _all_failed(where: str, samples: Sequence[Sample]) -> str | None:
    """"every one of the 12 requests of c=2 run 1 failed (refused: ...)", or None."""
    if not samples or any(s.ok for s in samples):
        return None
    reasons = sorted({f"{s.outcome}: {s.detail}" for s in samples})[:FAILURE_REASONS]
    return f"every one of the {len(samples)} requests of {where} failed ({'; '.join(reasons)})"


def _lengths(requests: Sequence[Request], config: BenchConfig, per_level: int) -> dict[str, Any]:
    """What the run sends: the drawn list past the warm-up, or a sample of a generated stream."""
    count = min(per_level, LENGTH_SAMPLE) if config.dataset.unique else per_level
    return length_stats(requests[config.warmup:config.warmup + count])


def _level(level: Level) -> dict[str, Any]:
    return {"kind": level.kind, "value": level.value, "label": level.label}


def _price(prices: PriceBook, gpu: dict[str, Any], override: float | None) -> Quote | None:
    """USD per hour for all the run's GPUs: --gpu-price x count, else the price book's quote x count."""
    count = gpu.get("count") or 1
    if override is not None:
        return Quote("--gpu-price", "command line", override * count, "USD", override * count)
    model = gpu.get("model")
    quote = prices.match(model) if model else None
    if quote is None:
        return None
    return dataclasses.replace(quote, amount=quote.amount * count, usd_per_hour=quote.usd_per_hour * count)


def _cost(quote: Quote | None, figures: dict[str, Any]) -> dict[str, Any]:
    """$/1M tokens = the GPUs' price per hour / measured throughput (the cost layer's formula)."""
    if quote is None:
        return {}
    output, total = figures["output_tokens_per_s"] or 0.0, figures["total_tokens_per_s"] or 0.0
    return {"usd_per_hour": quote.usd_per_hour,
            "usd_per_million_output_tokens": usd_per_million_tokens(quote.usd_per_hour, output),
            "usd_per_million_total_tokens": usd_per_million_tokens(quote.usd_per_hour, total)}
