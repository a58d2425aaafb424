"""What the overview page costs to render with many targets and GPUs.

    python -m bench.overview_page [--targets 1000] [--gpus 512] [--repeat 20]

Targets each serve one model with two windows (all quantiles present), GPUs with full readings,
a full hour in the charts' ring; one target in ten is down. The page is rendered from the views
as GET / does (overview model + Jinja2), without HTTP. Goal: well under a second at 1,000
targets, so a refreshing browser tab never competes with the collectors.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from monitor.config import load_settings
from monitor.infra.reading import GpuIdentity, GpuReading, GpuState, InfraView
from monitor.runtime import Monitor
from monitor.service.derive import Objectives, Window, WindowStats
from monitor.service.view import ServiceView, TargetView
from monitor.web.page import environment, render_page

WINDOWS = [Window("1m", 60.0), Window("5m", 300.0)]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def service_view(targets: int) -> ServiceView:
    view = ServiceView(ts=0.0, windows=WINDOWS, objectives=Objectives())
    quantiles = {"ttft": {0.5: 0.08, 0.99: 0.4}, "tpot": {0.5: 0.02, 0.99: 0.06}}
    for index in range(targets):
        name = f"vllm-{index:04d}"
        stats = {(MODEL, w.label): WindowStats(requests_per_second=5.0, error_ratio=0.001,
                                              generation_tokens_per_second=700.0, quantiles=quantiles)
                 for w in WINDOWS}
        gauges = {"running": {MODEL: 12.0}, "waiting": {MODEL: 1.0}, "kv_cache": {MODEL: 0.4}}
        view.targets[name] = TargetView(name, index % 10 != 0, "vllm", "v1", gauges=gauges, stats=stats)
    view.fleet = {(MODEL, w.label): WindowStats(requests_per_second=5.0 * targets, quantiles=quantiles)
                  for w in WINDOWS}
    return view


def infra_view(gpus: int) -> InfraView:
    reading = GpuReading(kernel_active_ratio=0.7, memory_used_bytes=60e9, memory_total_bytes=80e9,
                         temperature_celsius=61.0, power_watts=500.0, power_limit_watts=700.0, clock_event_mask=0x4)
    return InfraView(ts=0.0, gpus=tuple(
        GpuState(f"node-{g // 8:03d}", str(g % 8), "bench", True,
                 GpuIdentity(g % 8, f"GPU-{g:08d}", "NVIDIA H100", "580"), reading) for g in range(gpus)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    monitor = Monitor(load_settings(None, {"storage": {"url": "sqlite://"}, "infra": {"nvml": {"enabled": "false"}}}))
    monitor.service.view = service_view(args.targets)
    monitor.infra.view = infra_view(args.gpus)
    now = time.time()
    for step in range(720):  # a full ring: an hour at 5 s
        monitor.history.add(now - 3600 + step * 5, {"requests_per_second": 5.0 * args.targets, "ttft_p99_seconds": 0.4,
                                                     "gpu_utilization_ratio": 0.7, "usd_per_hour": 1000.0})
    template = environment().get_template("overview.html")
    times, size = [], 0
    for _ in range(args.repeat):
        started = time.perf_counter()
        size = len(render_page(template, monitor))
        times.append(time.perf_counter() - started)
    asyncio.run(monitor.aclose())
    print(f"overview page: {args.targets} targets, {args.gpus} GPUs, {size / 1024:.0f} KiB: "
          f"median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms over {args.repeat}")


if __name__ == "__main__":
    main()
