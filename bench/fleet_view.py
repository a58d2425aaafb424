"""The fleet view of N targets that serve the same models: what every publish tick assembles.

`ServiceCollector.assemble` sums each model's rates over the targets that serve it (counters,
and histogram buckets on the bounds all of them have), then derives the fleet's quantiles.
Under `infermon serve` that runs in the worker thread once per publish tick (every
min(scrape interval, infra interval): 5 s by default). Offline: one target's series store is
filled from the page of `bench.scale --models N` (through the collector's own ingest), derived,
and copied to N targets (each a copy of its own, as separate stores give); then `assemble` is
timed (CPU time: this VM's wall clock wanders), and a target's derivation next to it.

    python -m bench.fleet_view [--targets 1000] [--models 10]
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import time

import httpx

from bench.pages import fleet_page, grown
from monitor.config import load_settings
from monitor.health import HealthBook
from monitor.service.collector import ServiceCollector


def build(targets: int, models: int) -> tuple[ServiceCollector, float]:
    text = fleet_page(engines=1, models=models)
    settings = load_settings(None, {"service": {
        "windows": ["1m", "5m"], "targets": [{"name": "t0", "url": "http://127.0.0.1:9/metrics"}]}}).service
    collector = ServiceCollector(settings, httpx.AsyncClient(), HealthBook(), own_clients=True)
    state = collector.targets["t0"]
    start = 1.8e9
    for step in range(120):  # two minutes at 1 s: the 1m window full, the 5m one filling
        collector._ingest(state, grown(text, 1 + 0.01 * step), False, start + step)
    now = start + 119
    state.up = True
    state.derived = collector._derive_target(state, now)
    for index in range(1, targets):
        clone = copy.copy(state)
        clone.derived = copy.deepcopy(state.derived)
        collector.targets[f"t{index}"] = clone
    return collector, now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    collector, now = build(args.targets, args.models)
    gc.freeze()  # as `infermon serve` does after its first round: the collector's walks leave these out
    state = collector.targets["t0"]
    derive, assemble = [], []
    for _ in range(args.repeats):
        started = time.process_time()
        collector._derive_target(state, now)
        derive.append(time.process_time() - started)
        started = time.process_time()
        view = collector.assemble(now)
        assemble.append(time.process_time() - started)
    fleet = len([key for key in view.fleet if key[1] == "5m"])
    print(f"{args.targets} targets x {args.models} models ({fleet} fleet models a window): "
          f"assemble {statistics.median(assemble) * 1e3:.0f} ms CPU (median of {args.repeats}; "
          f"{min(assemble) * 1e3:.0f}-{max(assemble) * 1e3:.0f}), "
          f"one target's derivation {statistics.median(derive) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
