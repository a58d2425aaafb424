"""The HTTP path of one scrape alone: httpx (`fetch_page`, the injected-client path) against
the target's own kept-alive connection (`fetch_target_page`: the wire's httptools client, monitor/wire/, what
`infermon serve` scrapes with), and httpcore's pool (what it scraped with before) for reference.

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

import httpcore
import httpx

from monitor.config import load_settings
from monitor.scrape import fetch_page, fetch_target_page, target_connection
from tests.support.pagefarm import PageFarm
from tests.support.pages import fleet_page, v1_page


async def with_httpx(url: str, count: int) -> list[float]:
    timings = []
    async with httpx.AsyncClient(trust_env=False) as client:
        for _ in range(count):
            started = time.perf_counter()
            await fetch_page(client, url, 10.0, 50_000_000)
            timings.append(time.perf_counter() - started)
    return timings


async def with_httpcore(url: str, count: int) -> list[float]:
    """httpcore's pool, one connection kept alive, the whole body read (no checks: a lower bound)."""
    timings = []
    async with httpcore.AsyncConnectionPool(max_connections=1, max_keepalive_connections=1) as pool:
        for _ in range(count):
            started = time.perf_counter()
            async with pool.stream("GET", url, headers=[(b"Accept", b"text/plain")]) as response:
                b"".join([chunk async for chunk in response.aiter_stream()]).decode()
            timings.append(time.perf_counter() - started)
    return timings


async def with_kept(url: str, count: int) -> list[float]:
    timings = []
    conn = target_connection(load_settings(None).service, ssl.create_default_context())
    try:
        for _ in range(count):
            started = time.perf_counter()
            await fetch_target_page(conn, url, 10.0, 50_000_000)
            timings.append(time.perf_counter() - started)
    finally:
        await conn.aclose()
    return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    pages = {"v1": v1_page().encode(), "fleet": fleet_page().encode()}
    print(f"{'page':<6} {'bytes':>9} {'httpx ms':>9} {'httpcore ms':>12} {'kept ms':>8} {'httpx/kept':>10}"
          f" {'httpcore/kept':>13}")
    for name, body in pages.items():
        with PageFarm([body], processes=1) as farm:
            url = farm.urls(1)[0]
            results = {}
            for client, fetch in (("httpx", with_httpx), ("httpcore", with_httpcore), ("kept", with_kept)):
                timings = asyncio.run(fetch(url, args.requests))
                results[client] = statistics.median(timings[10:])
        ms = {client: seconds * 1000 for client, seconds in results.items()}
        print(f"{name:<6} {len(body):>9} {ms['httpx']:>9.3f} {ms['httpcore']:>12.3f} {ms['kept']:>8.3f}"
              f" {results['httpx'] / results['kept']:>10.2f} {results['httpcore'] / results['kept']:>13.2f}")


if __name__ == "__main__":
    main()
