"""A vLLM V1 SIMULATOR: OpenAI-compatible API and a vLLM-shaped /metrics page, no GPU.

Used by the monitor's tests (scraped like a real engine) and by `infermon demo`. Every
number on its page comes from requests it actually served, under a stationary latency
profile and an optional fault schedule; optionally with a host-memory KV tier, as the decode side
of a prefill/decode split, or as an MoE model, and with SGLang's page instead of vLLM's
(monitor.sim.tiers).
"""

from monitor.sim.engine import DEFAULT_MODEL, EngineConfig, LatencyProfile, SimulatedEngine
from monitor.sim.faults import (
    Fault,
    FaultEffects,
    FaultKind,
    FaultSchedule,
    demo_schedule,
    parse_faults,
    parse_schedule,
)
from monitor.sim.load import LoadConfig, LoadSummary, run_load
from monitor.sim.metrics import CONTENT_TYPE, SimMetrics
from monitor.sim.server import SimServer, create_app, serve
from monitor.sim.tiers import HostTier, MoeProfile, PdSplit

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_MODEL",
    "EngineConfig",
    "Fault",
    "FaultEffects",
    "FaultKind",
    "FaultSchedule",
    "HostTier",
    "LatencyProfile",
    "LoadConfig",
    "LoadSummary",
    "MoeProfile",
    "PdSplit",
    "SimMetrics",
    "SimServer",
    "SimulatedEngine",
    "create_app",
    "demo_schedule",
    "parse_faults",
    "parse_schedule",
    "run_load",
    "serve",
]
