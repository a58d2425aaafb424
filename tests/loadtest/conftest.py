"""Shared pieces of the bench tests: the simulator with a known latency model, a prompt file,
a run of `infermon bench` against it (seconds of load, not minutes)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.config import CostSettings
from monitor.cost.prices import PriceBook
from monitor.loadtest.data import load_dataset
from monitor.loadtest.load import Level
from monitor.loadtest.run import BenchConfig, run_bench
from monitor.loadtest.sampling import GpuSource
from monitor.loadtest.scenario import BUILT_IN
from monitor.sim import DEFAULT_MODEL, EngineConfig, LatencyProfile, SimServer, SimulatedEngine

MODEL = DEFAULT_MODEL
FIXTURES = Path(__file__).parent.parent / "fixtures"
H200_TRACE = FIXTURES / "nvml_h200_trace.json"


@pytest.fixture
def start_sim() -> Iterator[Callable[..., SimServer]]:
    """`start_sim(profile, **engine_config)` -> a running simulator on a free loopback port."""
    servers: list[SimServer] = []

    def start(profile: LatencyProfile, **config: Any) -> SimServer:
        config.setdefault("deterministic", True)
        config.setdefault("min_step_s", 0.001)  # every token on its own step, on time
        server = SimServer(SimulatedEngine(EngineConfig(**config), profile))
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    """A JSONL prompt file of short chat prompts (~10 to 60 tokens)."""
    lines = [f'{{"prompt": "question {i}: {"tell me about the river and the garden " * (1 + i % 6)}"}}'
             for i in range(40)]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def bench(url: str, dataset: Path, *, levels: list[Level] | None = None, gpus: GpuSource | None = None,
          prices: PriceBook | None = None, **options: Any) -> dict[str, Any]:
    """One `infermon bench run` against `url`, as the CLI runs it, returning the result dict."""
    options.setdefault("duration_s", 1.5)
    options.setdefault("repeats", 1)
    options.setdefault("warmup", 2)
    progress = options.pop("progress", None)
    config = BenchConfig(target=url, model=MODEL, scenario=BUILT_IN["chat"], dataset=load_dataset(dataset),
                         levels=levels or [Level("concurrency", 2)], **options)
    return asyncio.run(run_bench(config, gpus, prices or PriceBook(CostSettings()), progress))
