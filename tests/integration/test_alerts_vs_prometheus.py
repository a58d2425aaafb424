"""One rule file, two evaluators: the real Prometheus and the embedded evaluator fire the same alerts.

Prometheus loads (a short-`for` copy of) the shipped rule files and scrapes the monitor's
/metrics every second; the monitor evaluates the same copy every second on its own registry.
The monitor watches the vLLM simulator under load, with a latency spike and an error burst on
its fault schedule, and a replayed H200 (idle, burn at the power cap, memory fill, 30 % duty).
Every firing alert either one shows must show in the other within one scrape plus one
evaluation interval (and a second of slack for the polling). Takes about 90 seconds.

Where an input went missing on Prometheus' side the two part by design (monitor/alerting/evaluator.py):
a failed scrape of the monitor, or a page where the monitor's target was down or stale (behind:
the embedded evaluator holds that target's alerts, Prometheus resolves them as it does on any
failed scrape), restarts Prometheus' `for` and not the embedded one's. Such a disagreement, within
`for` plus the tolerance after a gap Prometheus recorded, is listed, not failed; any other fails.
On a busy machine those gaps come often (two CPU hogs beside: a scrape of the monitor or of the
simulator over its 1 s deadline, a few times a run).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.sim import EngineConfig, Fault, FaultSchedule, LatencyProfile, SimServer, SimulatedEngine
from monitor.sim.load import LoadConfig, run_load
from tests.conftest import FIXTURES, require_binary
from tests.support.alertrules import Labels, firing, name_of, short_rules
from tests.support.appserver import serve_app
from tests.support.promserver import PrometheusServer

pytestmark = pytest.mark.prometheus

RUN_SECONDS = 75.0
SETTLE_SECONDS = 6.0  # Prometheus starts after the monitor: compare once both have evaluated `for`
TOLERANCE_SECONDS = 3.0  # scrape interval + evaluation interval + polling slack
FOR_SECONDS = 2.0  # the rules' `for` in the short copy
PROFILE = LatencyProfile(prefill_s=0.04, prefill_per_token_s=0.0, per_token_s=0.004,
                         output_tokens=(20, 60), jitter=0.1)
FAULTS = FaultSchedule((Fault(12.0, 18.0, "latency_spike", 40.0), Fault(40.0, 15.0, "error_burst", 0.3)))
MUST_FIRE = {"GPUUtilizationLow", "GPUUtilizationSaturated", "GPUPowerHigh", "GPUMemoryHigh",
             "TTFTP99High", "ErrorRateHigh"}

Timeline = list[tuple[float, set[Labels], set[Labels]]]


Gap = tuple[float, dict[str, str]]  # when (s into the watch), and the labels it concerns ({}: every alert)


def disagreements(timeline: Timeline, tolerance: float, gaps: Sequence[Gap] = (), for_s: float = FOR_SECONDS,
                  explained: list[str] | None = None) -> list[str]:
    """Firing alerts seen by one evaluator that the other never showed within `tolerance`, but
    for those an input gap of Prometheus' explains (from `tolerance` before it to `for_s` +
    `tolerance` after, an alert that carries the gap's labels): those go to `explained`."""
    problems = []
    for t, ours, theirs in timeline:
        near = [(o, p) for at, o, p in timeline if abs(at - t) <= tolerance]
        ours_near = set().union(*(o for o, _ in near))
        theirs_near = set().union(*(p for _, p in near))
        for side, alerts in (("only embedded", ours - theirs_near), ("only prometheus", theirs - ours_near)):
            for alert in alerts:
                line = f"{t:5.1f}s {side}: {dict(alert)}"
                labels = dict(alert)
                if any(g - tolerance <= t <= g + for_s + tolerance and all(labels.get(k) == v for k, v in which.items())
                       for g, which in gaps):
                    if explained is not None:
                        explained.append(line)
                else:
                    problems.append(line)
    return problems


def prometheus_gaps(prom: PrometheusServer, started: float, seconds: float) -> list[Gap]:
    """Prometheus' missing inputs, from its own samples: its failed scrapes of the monitor (every
    alert), and the pages it read with a target down or stale, or a GPU down (that one's alerts)."""
    span = f"{int(seconds) + 60}s"
    gaps: list[Gap] = []
    for expr, bad, keys in ((f'up{{job="monitor"}}[{span}]', 0.0, ()),
                            (f"inference_target_up[{span}]", 0.0, ("target",)),
                            (f"inference_target_stale[{span}]", 1.0, ("target",)),
                            (f"inference_gpu_up[{span}]", 0.0, ("node", "gpu"))):
        for series in prom.query(expr):
            which = {k: series["metric"][k] for k in keys}
            gaps += [(float(ts) - started, which) for ts, value in series["values"] if float(value) == bad]
    return sorted(gaps, key=lambda gap: gap[0])


def watch(monitor_url: str, prom: PrometheusServer, seconds: float) -> Timeline:
    timeline: Timeline = []
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        # (a generous deadline: beside CPU hogs an answer took over 5 s, and the poll is the test's, not a bar)
        ours = firing(httpx.get(f"{monitor_url}/api/v1/alerts", timeout=30).json()["active"])
        theirs = firing(prom.alerts())
        timeline.append((elapsed, ours, theirs))
        time.sleep(0.25)
    return timeline


@pytest.mark.long
def test_prometheus_and_the_embedded_evaluator_fire_the_same_alerts(tmp_path: Path) -> None:
    binary = require_binary("prometheus")
    rules = short_rules(tmp_path, for_="2s", window="10s")
    sim = SimulatedEngine(EngineConfig(deterministic=True, seed=5), PROFILE)
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
            # The faults' timeline starts with the watch, not with the simulator: on a busy machine
            # starting the monitor and Prometheus took long enough to swallow the latency spike.
            shift = sim.now() - sim.started_at
            sim.faults = FaultSchedule(tuple(replace(f, start_s=f.start_s + shift) for f in FAULTS.faults))
            started = time.time()
            timeline = watch(url, prom, RUN_SECONDS)
            gaps = prometheus_gaps(prom, started, RUN_SECONDS)
        loader.join(timeout=30)
    compared = [entry for entry in timeline if entry[0] >= SETTLE_SECONDS]
    fired_ours = {name_of(a) for _, ours, _ in compared for a in ours}
    fired_theirs = {name_of(a) for _, _, theirs in compared for a in theirs}
    print(f"\nembedded fired {sorted(fired_ours)}\nprometheus fired {sorted(fired_theirs)}")
    assert fired_ours >= MUST_FIRE and fired_theirs >= MUST_FIRE
    explained: list[str] = []
    problems = disagreements(compared, TOLERANCE_SECONDS, gaps, FOR_SECONDS, explained)
    print(f"Prometheus' input gaps: {[(round(t, 1), which) for t, which in gaps]}")
    print("explained by them:", *explained, sep="\n  ")
    assert problems == []


def test_disagreements_allow_a_lag_but_not_a_missing_alert() -> None:
    hot = frozenset({("alertname", "GPUTemperatureHigh"), ("gpu", "0")})
    lagging: Timeline = [(0.0, {hot}, set()), (1.0, {hot}, set()), (2.0, {hot}, {hot}), (3.0, set(), {hot})]
    assert disagreements(lagging, 2.0) == []
    missing: Timeline = [(t, {hot}, set()) for t in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0)]
    assert len(disagreements(missing, 2.0)) == 6


def test_a_gap_of_prometheus_explains_a_disagreement_only_near_it_and_on_its_labels() -> None:
    hot = frozenset({("alertname", "TTFTP99High"), ("target", "a")})
    cold = frozenset({("alertname", "TTFTP99High"), ("target", "b")})
    timeline: Timeline = [(float(t), {hot, cold}, set()) for t in range(20)]
    explained: list[str] = []
    # target a stale at 5 s: 3 s before to 2 + 3 s after (2..10 s) explained; b's never
    problems = disagreements(timeline, 3.0, [(5.0, {"target": "a"})], 2.0, explained)
    assert [line[:5] for line in explained] == [f"{t:5.1f}" for t in range(2, 11)]
    assert len(problems) == 20 + 11
    # a failed scrape of the monitor concerns every alert
    assert len(disagreements(timeline, 3.0, [(5.0, {})], 2.0)) == 2 * 11
