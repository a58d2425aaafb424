"""What the cost layer costs per tick: derivation, the persisted totals, /metrics rendering.

    python -m bench.cost_tick [--nodes 8] [--gpus 64] [--gpus-per-target 8] [--repeat 50]

A fleet of nodes x gpus H100s, one target per `gpus-per-target` GPUs (mapped with node/gpus),
each serving its own model with two windows; the totals go to a real SQLite file. Goal: one
tick well under the service interval (15 s) even for 512 GPUs — in practice, milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from monitor.config import load_settings
from monitor.cost.collector import CostCollector
from monitor.cost.render import render_cost
from monitor.exporter import TextWriter, make_registry, render_text
from monitor.health import HealthBook
from monitor.infra.reading import GpuIdentity, GpuReading, GpuState, InfraView
from monitor.service.derive import Objectives, Window, WindowStats
from monitor.service.view import ServiceView, TargetView
from monitor.store.session import Store

WINDOWS = [Window("1m", 60.0), Window("5m", 300.0)]
LENGTHS = {le: n for le, n in zip((100.0, 500.0, 1000.0, 5000.0, float("inf")), (50.0, 90.0, 99.0, 100.0, 100.0),
                                  strict=True)}


def fleet(nodes: int, gpus: int, per_target: int) -> tuple[list[dict[str, Any]], InfraView, ServiceView]:
    targets, states = [], []
    service = ServiceView(ts=0.0, windows=WINDOWS, objectives=Objectives())
    for n in range(nodes):
        node = f"gpu-node-{n:02d}"
        for g in range(gpus):
            identity = GpuIdentity(g, f"GPU-{n:02d}{g:06d}", "NVIDIA H100 80GB HBM3", "580")
            states.append(GpuState(node, str(g), "bench", True, identity, GpuReading(kernel_active_ratio=0.6)))
        for first in range(0, gpus, per_target):
            name = f"{node}-t{first}"
            targets.append({"name": name, "url": f"http://{name}/metrics", "node": node,
                            "gpus": list(range(first, first + per_target))})
            stats = WindowStats(generation_tokens_per_second=2000.0, prompt_tokens_per_second=6000.0,
                                lengths={"prompt_len": LENGTHS}, baseline_lengths={"prompt_len": LENGTHS})
            service.targets[name] = TargetView(name, True, "vllm", "v1",
                                               stats={(f"model-{name}", w.label): stats for w in WINDOWS})
            for w in WINDOWS:
                service.fleet[(f"model-{name}", w.label)] = stats
    return targets, InfraView(0.0, tuple(states)), service


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--gpus-per-target", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    targets, infra, service = fleet(args.nodes, args.gpus, args.gpus_per_target)
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(None, {"service": {"windows": ["1m", "5m"], "targets": targets},
                                        "storage": {"url": f"sqlite:///{Path(tmp) / 'bench.db'}"},
                                        "cost": {"daily_budget_usd": 5000}})
        store = Store(settings.storage.url)
        clock = [1_767_240_000.0]
        # The collectors' views only
        service_source: Any = SimpleNamespace(view=service)
        infra_source: Any = SimpleNamespace(view=infra)
        collector = CostCollector(settings, service_source, infra_source, HealthBook(), store, wall=lambda: clock[0])
        ticks, renders = [], []
        registry, writer = make_registry([lambda: render_cost(collector.view)]), TextWriter()
        for _ in range(args.repeat):
            clock[0] += 15.0
            started = time.perf_counter()
            asyncio.run(collector.collect())
            ticks.append(time.perf_counter() - started)
            started = time.perf_counter()
            page = render_text(registry, writer)
            renders.append(time.perf_counter() - started)
        store.close()
    gpus = args.nodes * args.gpus
    print(f"cost tick, {gpus} GPUs, {len(targets)} targets/models, 2 windows, SQLite totals: "
          f"median {statistics.median(ticks) * 1000:.1f} ms, max {max(ticks) * 1000:.1f} ms")
    lines = page.count(b"\n")
    print(f"render cost families ({lines} lines): median {statistics.median(renders) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
