"""Scrape + parse + derive of one engine page, side by side with the real Prometheus.

Both scrape the same loopback pages once a second in the same run; we report our median
collection time per page next to Prometheus' median `scrape_duration_seconds` and the ratio.

    python -m bench.service_scrape [--seconds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx

from bench.pages import fleet_page, grown, v1_page
from bench.pageserver import PageServer, growing
from bench.promserver import PrometheusServer
from monitor.config import load_settings
from monitor.health import HealthBook
from monitor.scrape import fetch_page_core
from monitor.service.collector import ServiceCollector


def variants(text: str, count: int) -> list[bytes]:
    return [grown(text, 1 + 0.01 * i).encode() for i in range(count)]


async def measure(url: str, seconds: float) -> tuple[list[float], list[float]]:
    settings = load_settings(None, {"service": {
        "windows": ["1m", "5m"], "targets": [{"name": "bench", "url": url}]}}).service
    async with httpx.AsyncClient(trust_env=False) as client:
        collector = ServiceCollector(settings, client, HealthBook(), own_clients=True)  # as `infermon serve`
        timings = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            await collector.collect()
            timings.append(time.perf_counter() - started)
            await asyncio.sleep(max(0.0, 1.0 - timings[-1]))
        assert collector.targets["bench"].up, collector.targets["bench"].error
        pool = collector.targets["bench"].pool
        assert pool is not None
        http = []  # the HTTP path alone, on the same kept-alive connection
        for _ in range(50):
            started = time.perf_counter()
            await fetch_page_core(pool, url, 10.0, settings.max_page_bytes)
            http.append(time.perf_counter() - started)
        await collector.aclose()
    return timings[3:], http[5:]  # the first scrapes fill caches and windows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=40)
    args = parser.parse_args()
    count = int(args.seconds) + 30
    pages = {"/v1": v1_page(), "/fleet": fleet_page()}
    served = {path: growing(variants(text, count)) for path, text in pages.items()}
    with PageServer(served) as server:
        jobs = {path.strip("/"): [f"{server.base}{path}"] for path in pages}
        with PrometheusServer(jobs, interval="1s") as prom:
            rows = []
            for path, text in pages.items():
                ours, http = asyncio.run(measure(f"{server.base}{path}", args.seconds / 2))
                job = path.strip("/")
                expr = f'quantile_over_time(0.5, scrape_duration_seconds{{job="{job}"}}[{int(args.seconds)}s])'
                result = prom.query(expr)
                theirs = float(result[0]["value"][1])
                rows.append((path, len(text), statistics.median(ours), statistics.median(http), theirs))
    # infermon ms: scrape + parse + derive; http ms: the fetch alone; prometheus: scrape_duration_seconds
    print(f"{'page':<8} {'bytes':>9} {'infermon ms':>12} {'http ms':>8} {'prometheus ms':>14} "
          f"{'ratio':>6} {'http ratio':>10}")
    for path, size, ours_s, http_s, theirs_s in rows:
        print(f"{path:<8} {size:>9} {ours_s * 1000:>12.2f} {http_s * 1000:>8.2f} {theirs_s * 1000:>14.2f} "
              f"{ours_s / theirs_s:>6.2f} {http_s / theirs_s:>10.2f}")


if __name__ == "__main__":
    main()
