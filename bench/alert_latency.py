"""Time from a fault injected in the vLLM simulator to the alert firing: embedded vs Prometheus.

One run, the same rules (the shipped ErrorRateHigh and TTFTP99High, `for` set by --for), the
same intervals on both sides (Prometheus' defaults: scrape 15 s, evaluation 15 s): the monitor
scrapes the simulator and evaluates on its own registry; the real Prometheus scrapes the
monitor's /metrics and evaluates the same file. We poll both /api/v1/alerts every 0.2 s.

Timed to "firing" on each side: webhook delivery (the outbox, Alertmanager's group_wait) is
not part of this branch, and Prometheus would add Alertmanager's group_wait (30 s) on top.
Goal: embedded <= scrape interval + for + 2 s.

    python -m bench.alert_latency [--scrape 15s] [--for 30s]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path

import httpx

from monitor.config import Duration, load_settings
from monitor.runtime import Monitor
from monitor.sim import EngineConfig, LatencyProfile, SimServer, SimulatedEngine
from monitor.sim.faults import FaultKind
from monitor.sim.load import LoadConfig, run_load
from tests.support.alertrules import firing, name_of, short_rules
from tests.support.appserver import serve_app
from tests.support.promserver import PrometheusServer

PROFILE = LatencyProfile(prefill_s=0.04, prefill_per_token_s=0.0, per_token_s=0.004,
                         output_tokens=(20, 60), jitter=0.1)
FAULTS: list[tuple[FaultKind, float, str]] = [("error_burst", 0.3, "ErrorRateHigh"),
                                              ("latency_spike", 40.0, "TTFTP99High")]


def fired(alerts: list[dict[str, object]], name: str) -> bool:
    return any(name_of(labels) == name for labels in firing(alerts))


def time_to_fire(sim: SimulatedEngine, kind: FaultKind, magnitude: float, alert: str,
                 monitor_url: str, prom: PrometheusServer, timeout: float) -> tuple[float | None, float | None]:
    sim.inject(kind, magnitude)
    started = time.monotonic()
    ours = theirs = None
    while (ours is None or theirs is None) and time.monotonic() - started < timeout:
        now = time.monotonic() - started
        if ours is None and fired(httpx.get(f"{monitor_url}/api/v1/alerts", timeout=5).json()["active"], alert):
            ours = now
        if theirs is None and fired(prom.alerts(), alert):
            theirs = now
        time.sleep(0.2)
    sim.clear_injected()
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrape", default="15s", help="scrape and evaluation interval, both sides")
    parser.add_argument("--for", dest="for_", default="30s", help="the rules' `for`")
    args = parser.parse_args()
    scrape, hold = Duration(args.scrape).seconds, Duration(args.for_).seconds
    goal = scrape + hold + 2
    with tempfile.TemporaryDirectory() as tmp:
        rules = short_rules(Path(tmp), for_=args.for_, window="5m", only=[alert for _, _, alert in FAULTS])
        sim = SimulatedEngine(EngineConfig(deterministic=True, seed=11), PROFILE)
        with SimServer(sim) as server:
            settings = load_settings(None, {
                "service": {"scrape_interval": args.scrape, "targets": [{"name": "sim", "url": server.metrics_url}]},
                "infra": {"nvml": {"enabled": "false"}},
                "storage": {"url": "sqlite://"},
                "alerting": {"rules_files": [str(p) for p in rules], "evaluation_interval": args.scrape},
            })
            load = LoadConfig(rps=8, duration_s=3600, prompt_words=(20, 60), max_tokens=None, seed=1)
            threading.Thread(target=lambda: asyncio.run(run_load(server.url, load)), daemon=True).start()
            with serve_app(Monitor(settings)) as url, \
                    PrometheusServer({"monitor": [f"{url}/metrics"]}, interval=args.scrape,
                                     rule_files=rules) as prom:
                time.sleep(2 * scrape + 5)  # both have scraped twice and evaluated
                print(f"scrape = evaluation interval {scrape:g} s, for {hold:g} s; goal embedded <= {goal:g} s")
                for kind, magnitude, alert in FAULTS:
                    ours, theirs = time_to_fire(sim, kind, magnitude, alert, url, prom, timeout=3 * scrape + hold + 30)
                    ratio = f"{theirs / ours:.2f}x" if ours and theirs else "n/a"
                    verdict = "meets goal" if ours is not None and ours <= goal else "MISSES goal"
                    print(f"{kind:>14} -> {alert:<14} embedded {_s(ours)}  prometheus {_s(theirs)}  "
                          f"prometheus/embedded {ratio}  ({verdict})")


def _s(value: float | None) -> str:
    return f"{value:6.1f} s" if value is not None else "  never"


if __name__ == "__main__":
    main()
