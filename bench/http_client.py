"""The HTTP path of one scrape alone: httpx (`fetch_page`, the injected-client path) against
httpcore directly (`fetch_page_core`, what `infermon serve` scrapes with).

Sequential keep-alive GETs of the 55 KB V1 page and the ~1 MB fleet page from the page farm;
the median time per complete fetch (request sent, whole body read) for each client.

    python -m bench.http_client [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import time

import httpx

from bench.pagefarm import PageFarm
from bench.pages import fleet_page, v1_page
from monitor.config import load_settings
from monitor.scrape import fetch_page, fetch_page_core, target_pool


async def with_httpx(url: str, count: int) -> list[float]:
    timings = []
    async with httpx.AsyncClient(trust_env=False) as client:
        for _ in range(count):
            started = time.perf_counter()
            await fetch_page(client, url, 10.0, 50_000_000)
            timings.append(time.perf_counter() - started)
    return timings


async def with_httpcore(url: str, count: int) -> list[float]:
    timings = []
    async with target_pool(load_settings(None).service, ssl.create_default_context()) as pool:
        for _ in range(count):
            started = time.perf_counter()
            await fetch_page_core(pool, url, 10.0, 50_000_000)
            timings.append(time.perf_counter() - started)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    pages = {"v1": v1_page().encode(), "fleet": fleet_page().encode()}
    print(f"{'page':<6} {'bytes':>9} {'httpx ms':>9} {'httpcore ms':>12} {'ratio':>6}")
    for name, body in pages.items():
        with PageFarm([body], processes=1) as farm:
            url = farm.urls(1)[0]
            results = {}
            for client, fetch in (("httpx", with_httpx), ("httpcore", with_httpcore)):
                timings = asyncio.run(fetch(url, args.requests))
                results[client] = statistics.median(timings[10:])
        ratio = results["httpx"] / results["httpcore"]
        ours, theirs = results["httpx"] * 1000, results["httpcore"] * 1000
        print(f"{name:<6} {len(body):>9} {ours:>9.3f} {theirs:>12.3f} {ratio:>6.2f}")


if __name__ == "__main__":
    main()
