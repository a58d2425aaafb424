"""One benchmark run: conditions, warm-up, then every level `repeats` times, each window measured
together with the GPUs and the engine page; the result is a plain dict (result.py writes it).

    for each repeat:  for each level:  [GPU sampler + engine scrapes]  load for --duration
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import httpx

from monitor.cost.derive import usd_per_million_tokens
from monitor.cost.prices import PriceBook, Quote
from monitor.loadtest import SCHEMA_VERSION
from monitor.loadtest.bounded import ERROR_BYTES, EVENT_BYTES, RESPONSE_FLOOR_BYTES, Caps
from monitor.loadtest.conditions import PROBE_MAX_BYTES, PROBE_TIMEOUT_S, server_conditions, tool_conditions
from monitor.loadtest.data import Dataset, draw_requests, length_stats
from monitor.loadtest.load import Level, LoadRunner, Progress, make_client
from monitor.loadtest.sampling import EnginePage, GpuSampler, GpuSource, open_source
from monitor.loadtest.scenario import Scenario
from monitor.loadtest.stats import Goodput, over_repeats, window_figures
from monitor.redaction import safe_url
from monitor.service.derive import Objectives

TTFT_SAMPLES_KEPT = 5000  # per level, for the report's distribution (all repeats together)
FAILURE_REASONS = 3  # distinct reasons kept per failed outcome and window


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

    @property
    def base(self) -> str:
        return self.target.rstrip("/").removesuffix("/v1")


async def run_bench(config: BenchConfig, gpus: GpuSource | None, prices: PriceBook,
                    progress: Progress | None = None) -> dict[str, Any]:
    per_level = max(1, round(config.duration_s * 50))  # enough requests drawn not to cycle soon
    requests = draw_requests(config.dataset, config.scenario, config.warmup + per_level, config.seed)
    caps = Caps(config.max_response_bytes or RESPONSE_FLOOR_BYTES, config.max_event_bytes, config.max_error_bytes)
    client = make_client(f"{config.base}/v1", config.api_key, config.timeout_s, caps)
    async with httpx.AsyncClient(timeout=10.0) as http:
        gpus, gpu_conditions = await open_source(gpus)
        engine = EnginePage(f"{config.base}/metrics", http, config.model, timeout_s=config.probe_timeout_s,
                            max_bytes=config.probe_max_bytes)
        await engine.scrape()
        spec = engine.spec
        server = await server_conditions(http, config.base, engine.text, spec.engine if spec else None,
                                         spec.generation if spec else None, timeout_s=config.probe_timeout_s,
                                         max_bytes=config.probe_max_bytes, page_error=engine.error)
        quote = _price(prices, gpu_conditions, config.gpu_price_usd_per_hour)
        runner = LoadRunner(client, config.model, requests, timeout_s=config.timeout_s,
                            extra_body=config.extra_body, seed=config.seed, progress=progress,
                            max_response_bytes=config.max_response_bytes)
        try:
            warm = await runner.warmup(config.warmup, config.levels[0])
            windows: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(config.levels))}
            ttfts: dict[int, list[float]] = {i: [] for i in range(len(config.levels))}
            for _ in range(config.repeats):
                for i, level in enumerate(config.levels):
                    figures, samples = await _window(config, runner, level, gpus, engine, quote)
                    windows[i].append(figures)
                    ttfts[i].extend(s.ttft_s for s in samples if s.ok and s.ttft_s is not None)
        finally:
            await client.close()
            if gpus is not None:
                await gpus.aclose()
    conditions = {
        "workload": {"scenario": config.scenario.describe(), "dataset": config.dataset.describe(),
                     "lengths": length_stats(requests[config.warmup:]), "levels": [_level(lv) for lv in config.levels],
                     "duration_s": config.duration_s, "repeats": config.repeats, "warmup_requests": config.warmup,
                     "seed": config.seed, "goodput": dataclasses.asdict(config.goodput)},
        "gpu": gpu_conditions,
        "server": server,
        "user": {"precision": config.precision, "note": config.note},
        "price": quote.as_dict() if quote is not None else None,
        "tool": tool_conditions(),
    }
    return {
        "schema": "infermon-bench",
        "schema_version": SCHEMA_VERSION,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "target": safe_url(config.base),
        "model": config.model,
        "synthetic": config.dataset.source == "synthetic",
        "warmup": {"requests": len(warm), "failed": sum(1 for s in warm if not s.ok), "excluded": True},
        "conditions": conditions,
        "levels": [{"level": _level(level), "repeats": windows[i], "summary": over_repeats(windows[i]),
                    "ttft_samples_s": ttfts[i][:TTFT_SAMPLES_KEPT]} for i, level in enumerate(config.levels)],
    }


async def _window(config: BenchConfig, runner: LoadRunner, level: Level, gpus: GpuSource | None,
                  engine: EnginePage, quote: Quote | None) -> tuple[dict[str, Any], list[Any]]:
    objectives = Objectives(config.goodput.ttft_s, config.goodput.tpot_s)
    async with engine.window(config.sample_interval_s) as seen:
        if gpus is not None:
            async with GpuSampler(gpus, config.sample_interval_s).window() as gpu_window:
                samples, wall_s = await runner.measure(level, config.duration_s)
        else:
            gpu_window, (samples, wall_s) = None, await runner.measure(level, config.duration_s)
    figures = window_figures(samples, wall_s, config.goodput)
    figures["gpu"] = gpu_window.figures(figures["output_tokens"]) if gpu_window is not None else {}
    figures["engine"] = seen.figures(objectives, config.model)
    figures["cost"] = _cost(quote, figures)
    figures["outcomes"] = {o: sum(1 for s in samples if s.outcome == o) for o in sorted({s.outcome for s in samples})}
    # why the failures failed, not only how many: up to FAILURE_REASONS distinct reasons an outcome
    figures["failure_reasons"] = {o: sorted({s.detail for s in samples if s.outcome == o})[:FAILURE_REASONS]
                                  for o in figures["outcomes"] if o != "ok"}
    return figures, samples


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
