"""A llama.cpp-only fleet on loopback: one llama-server page (the recorded fixture, its counters
growing each scrape) and a canary streaming from the simulator, collected on an injected clock that
ends now, then served by the real app. Used by tests/web/test_llama_fleet.py and
tests/web/screenshots.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from monitor.app import create_app
from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.sim import DEFAULT_MODEL, EngineConfig, LatencyProfile, SimServer, SimulatedEngine
from tests.conftest import FIXTURES
from tests.service.pagegen import grow
from tests.support.appserver import serve_asgi
from tests.support.pageserver import Generated, PageServer

LLAMA_PAGE = (FIXTURES / "pages" / "llamacpp.prom").read_text()
TARGET = "llama-server-a"


def collected_until_now(monitor: Monitor, cycles: int = 6, step: float = 5.0) -> None:
    """Collection cycles on an injected clock that ends now, so the charts' hour holds them; the
    canary probes once before each (its own slots run on the monotonic clock). The monitor is
    closed after (its clients belong to this loop); its views stay for the page."""
    clock = [time.time() - cycles * step]
    monitor.wall = lambda: clock[0]

    async def run() -> None:
        for _ in range(cycles):
            await monitor.canary.probe_all()
            await monitor.run_once()
            clock[0] += step
        await monitor.aclose()

    asyncio.run(run())


@contextmanager
def serving_llama_fleet(cycles: int = 6) -> Iterator[tuple[str, dict[str, Any]]]:
    """The monitor's URL and its overview (`cycles` collections in)."""
    profile = LatencyProfile(prefill_s=0.05, prefill_per_token_s=0.0, per_token_s=0.005, output_tokens=(8, 8),
                             jitter=0.0)
    sim = SimServer(SimulatedEngine(EngineConfig(deterministic=True, min_step_s=0.001), profile)).start()
    try:
        with PageServer() as pages:
            pages.set("/metrics", Generated(lambda hit: grow(LLAMA_PAGE, 1 + 0.1 * hit, prefix="llamacpp:")))
            settings = load_settings(None, {
                "infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                "service": {"scrape_interval": "5s", "windows": ["30s", "1m"],
                            "targets": [{"name": TARGET, "url": pages.url("/metrics")}]},
                "canary": {"probes": [{"name": "llama-chat", "base_url": f"{sim.url}/v1", "model": DEFAULT_MODEL,
                                       "max_tokens": 8, "timeout": "5s", "target": TARGET}]}})
            monitor = Monitor(settings)
            collected_until_now(monitor, cycles)
            overview = monitor.status()["overview"]
            with serve_asgi(create_app(monitor, schedule=False)) as url:
                yield url, overview
    finally:
        sim.stop()
