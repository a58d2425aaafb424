from __future__ import annotations

from typing import Any

from monitor.config import Settings, load_settings
from monitor.runtime import Monitor
from tests.infra.scrape import Samples, samples


def infra_settings(**infra: Any) -> Settings:
    infra.setdefault("node", "node-a")
    infra.setdefault("timeout", "300ms")
    return load_settings(None, {"infra": infra})


def nvml_monitor(nvml: Any, enabled: str = "true", **infra: Any) -> Monitor:
    """A Monitor whose NVML is the fake module `nvml` (tests inject, never import, pynvml)."""
    return Monitor(infra_settings(nvml={"enabled": enabled}, **infra), load_nvml=lambda: nvml)


async def tick(monitor: Monitor) -> Samples:
    """One collection of every layer, then the /metrics page as samples."""
    await monitor.run_once()
    return samples(monitor.metrics_text().decode())
