"""One rule file, two evaluators: the real Prometheus and the embedded evaluator fire the same alerts.

Prometheus loads (a short-`for` copy of) the shipped rule files and scrapes the monitor's
/metrics every second; the monitor evaluates the same copy every second on its own registry.
The monitor watches the vLLM simulator under load, with a latency spike and an error burst on
its fault schedule, and a replayed H200 (idle, burn at the power cap, memory fill, 30 % duty).
Every firing alert either one shows must show in the other within one scrape plus one
evaluation interval (and a second of slack for the polling). Takes about 90 seconds.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest

from bench.alertrules import Labels, firing, name_of, short_rules
from bench.promserver import PrometheusServer
from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.sim import EngineConfig, Fault, FaultSchedule, LatencyProfile, SimServer, SimulatedEngine
from monitor.sim.load import LoadConfig, run_load
from tests.appserver import serve_app
from tests.conftest import FIXTURES, require_binary

pytestmark = pytest.mark.prometheus

RUN_SECONDS = 75.0
SETTLE_SECONDS = 6.0  # Prometheus starts after the monitor: compare once both have evaluated `for`
TOLERANCE_SECONDS = 3.0  # scrape interval + evaluation interval + polling slack
PROFILE = LatencyProfile(prefill_s=0.04, prefill_per_token_s=0.0, per_token_s=0.004,
                         output_tokens=(20, 60), jitter=0.1)
FAULTS = FaultSchedule((Fault(12.0, 18.0, "latency_spike", 40.0), Fault(40.0, 15.0, "error_burst", 0.3)))
MUST_FIRE = {"GPUUtilizationLow", "GPUUtilizationSaturated", "GPUPowerHigh", "GPUMemoryHigh",
             "TTFTP99High", "ErrorRateHigh"}

Timeline = list[tuple[float, set[Labels], set[Labels]]]


def disagreements(timeline: Timeline, tolerance: float) -> list[str]:
    """Firing alerts seen by one evaluator that the other never showed within `tolerance`."""
    problems = []
    for t, ours, theirs in timeline:
        near = [(o, p) for at, o, p in timeline if abs(at - t) <= tolerance]
        ours_near = set().union(*(o for o, _ in near))
        theirs_near = set().union(*(p for _, p in near))
        problems += [f"{t:5.1f}s only embedded: {dict(a)}" for a in ours - theirs_near]
        problems += [f"{t:5.1f}s only prometheus: {dict(a)}" for a in theirs - ours_near]
    return problems


def watch(monitor_url: str, prom: PrometheusServer, seconds: float) -> Timeline:
    timeline: Timeline = []
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        ours = firing(httpx.get(f"{monitor_url}/api/v1/alerts", timeout=5).json()["active"])
        theirs = firing(prom.alerts())
        timeline.append((elapsed, ours, theirs))
        time.sleep(0.25)
    return timeline


@pytest.mark.long
def test_prometheus_and_the_embedded_evaluator_fire_the_same_alerts(tmp_path: Path) -> None:
    binary = require_binary("prometheus")
    rules = short_rules(tmp_path, for_="2s", window="10s")
    sim = SimulatedEngine(EngineConfig(deterministic=True, seed=5), PROFILE, FAULTS)
    with SimServer(sim) as server:
        settings = load_settings(None, {
            "service": {"scrape_interval": "1s", "windows": ["10s"], "baseline_window": "20s",
                        "targets": [{"name": "vllm-sim", "url": server.metrics_url}]},
            "infra": {"interval": "1s", "node": "h200-replay",
                      "replay": {"file": str(FIXTURES / "nvml_h200_trace.json")}},
            "alerting": {"rules_files": [str(p) for p in rules], "evaluation_interval": "1s"},
        })
        load = LoadConfig(rps=10, duration_s=RUN_SECONDS + 10, stream_share=0.5, prompt_words=(20, 60),
                          max_tokens=None, seed=1, drain_timeout_s=5)
        loader = threading.Thread(target=lambda: asyncio.run(run_load(server.url, load)), daemon=True)
        loader.start()
        with serve_app(Monitor(settings)) as url, \
                PrometheusServer({"monitor": [f"{url}/metrics"]}, interval="1s", binary=binary,
                                 rule_files=rules) as prom:
            timeline = watch(url, prom, RUN_SECONDS)
        loader.join(timeout=30)
    compared = [entry for entry in timeline if entry[0] >= SETTLE_SECONDS]
    fired_ours = {name_of(a) for _, ours, _ in compared for a in ours}
    fired_theirs = {name_of(a) for _, _, theirs in compared for a in theirs}
    print(f"\nembedded fired {sorted(fired_ours)}\nprometheus fired {sorted(fired_theirs)}")
    assert fired_ours >= MUST_FIRE and fired_theirs >= MUST_FIRE
    assert disagreements(compared, TOLERANCE_SECONDS) == []


def test_disagreements_allow_a_lag_but_not_a_missing_alert() -> None:
    hot = frozenset({("alertname", "GPUTemperatureHigh"), ("gpu", "0")})
    lagging: Timeline = [(0.0, {hot}, set()), (1.0, {hot}, set()), (2.0, {hot}, {hot}), (3.0, set(), {hot})]
    assert disagreements(lagging, 2.0) == []
    missing: Timeline = [(t, {hot}, set()) for t in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)]
    assert len(disagreements(missing, 2.0)) == 6
