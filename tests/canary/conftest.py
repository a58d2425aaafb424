"""Shared pieces of the canary tests: the simulator told exact delays, a Monitor with probes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.sim import DEFAULT_MODEL, EngineConfig, LatencyProfile, SimServer, SimulatedEngine

MODEL = DEFAULT_MODEL
PREFILL_S = 0.2  # the TTFT the simulator is told to produce
PER_TOKEN_S = 0.02  # the TPOT it is told to produce
MAX_TOKENS = 32
# No jitter, no prompt-length term, every answer longer than max_tokens: each request's TTFT is
# PREFILL_S and each gap between tokens PER_TOKEN_S, in the simulator's model time.
def exact_profile(prefill_s: float = PREFILL_S) -> LatencyProfile:
    return LatencyProfile(prefill_s=prefill_s, prefill_per_token_s=0.0, per_token_s=PER_TOKEN_S,
                          output_tokens=(4 * MAX_TOKENS, 4 * MAX_TOKENS), jitter=0.0)


EXACT = exact_profile()


def samples(page: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A /metrics page as {(sample name, sorted labels): value}, read by prometheus_client's parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(page.decode()) for s in family.samples}


@pytest.fixture
def start_sim() -> Iterator[Callable[..., SimServer]]:
    """`start_sim(profile)` -> a running simulator on a free loopback port, stopped afterwards."""
    servers: list[SimServer] = []

    def start(profile: LatencyProfile = EXACT) -> SimServer:
        # min_step_s well under PER_TOKEN_S: every token is delivered on its own step, on time.
        server = SimServer(SimulatedEngine(EngineConfig(deterministic=True, min_step_s=0.001), profile))
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


def probe(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "base_url": base_url, "model": MODEL, "max_tokens": MAX_TOKENS, "timeout": "5s", **extra}


def canary_monitor(probes: list[dict[str, Any]], targets: dict[str, str] | None = None,
                   service: dict[str, Any] | None = None, **canary: Any) -> Monitor:
    """A Monitor (no GPUs) with these probes and these service targets {name: metrics URL}."""
    settings = load_settings(None, {
        "infra": {"nvml": {"enabled": "false"}},
        "service": {"targets": [{"name": n, "url": u} for n, u in (targets or {}).items()], **(service or {})},
        "canary": {"probes": probes, **canary},
    })
    return Monitor(settings)
