"""Shared pieces for the vLLM V1 simulator tests: a fast latency profile, a server factory
that always stops what it started, and a parsed view of a /metrics page."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.sim import EngineConfig, LatencyProfile, SimServer, SimulatedEngine

# Milliseconds instead of tens of milliseconds: the suite must stay well under 30 s.
FAST = LatencyProfile(
    prefill_s=0.005, prefill_per_token_s=0.0, per_token_s=0.002, output_tokens=(5, 20), jitter=0.1
)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ENGINE = {"engine": "0", "model_name": MODEL}


class Page:
    """One scrape, parsed by prometheus_client's own parser."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = list(text_string_to_metric_families(text))

    def samples(self, sample_name: str, **labels: str) -> list[Any]:
        return [
            s for f in self.families for s in f.samples
            if s.name == sample_name and labels.items() <= s.labels.items()
        ]  # fmt: skip

    def value(self, sample_name: str, **labels: str) -> float:
        return sum(s.value for s in self.samples(sample_name, **labels))

    def buckets(self, histogram: str, **labels: str) -> list[tuple[float, float]]:
        pairs = [(float(s.labels["le"]), s.value) for s in self.samples(f"{histogram}_bucket", **labels)]
        return sorted(pairs, key=lambda pair: pair[0])

    def mean(self, histogram: str) -> float:
        count = self.value(f"{histogram}_count")
        return self.value(f"{histogram}_sum") / count if count else math.nan


@pytest.fixture
def start_sim() -> Iterator[Callable[..., SimServer]]:
    """`start_sim(profile=FAST, **engine_config)` -> a running SimServer, stopped afterwards."""
    servers: list[SimServer] = []

    def start(profile: LatencyProfile = FAST, **config: Any) -> SimServer:
        config.setdefault("deterministic", True)
        config.setdefault("min_step_s", 0.001)
        server = SimServer(SimulatedEngine(EngineConfig(**config), profile))
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def scrape() -> Callable[[SimServer], Page]:
    def get(server: SimServer) -> Page:
        response = httpx.get(server.metrics_url, timeout=5.0)
        response.raise_for_status()
        return Page(response.text)

    return get


def chat(server: SimServer, content: str = "hello simulated world", **extra: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=10.0)


@pytest.fixture
def send_chat() -> Callable[..., httpx.Response]:
    return chat
