"""A flood of readers of `/` and `/api/v1/status` against `infermon serve`, /healthz probed meanwhile.

N clients (httpx, loopback, in a process of their own), half asking for the page and half for the
status, each again as soon as its last answer came; the bench's own thread GETs /healthz every
50 ms all along. For each N in turn: the probe's p50 / p99 / max, and how many answers the flood got
and how many failed. A quiet probe first, for reference.

    python -m bench.render_flood [--targets 200] [--clients 200,400] [--seconds 20] [--root DIR]

The monitor scrapes `--targets` V1 pages (55 KB) from a page farm every 5 s and replays 8 GPUs.
`--root`: the checkout whose `monitor` package is served (another version, the same bench). Every
process it starts is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from bench.scale import ROOT, monitor_config, stop_process
from monitor.ports import free_port
from tests.support.pagefarm import PageFarm
from tests.support.pages import grown, v1_page

PATHS = ("/", "/api/v1/status")
PROBE_PERIOD = 0.05


def start_monitor(config: Path, port: int, workdir: Path, root: Path) -> subprocess.Popen[bytes]:
    """`infermon serve` from `root` (its `monitor` package comes first on the path), once /readyz is 200."""
    with (workdir / "infermon.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "serve", "-c", str(config)],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=root)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2, trust_env=False).status_code == 200:
                return process
        except httpx.HTTPError:
            pass  # not listening yet: asked again until the deadline
        time.sleep(0.3)
    stop_process(process)
    raise RuntimeError(f"infermon did not get ready: {(workdir / 'infermon.log').read_text()[-2000:]}")


async def _flood(url: str, clients: int, seconds: float, out: Connection) -> dict[str, Any]:
    counts: dict[str, Any] = {"answers": 0, "failed": 0, "why": Counter(), "first": {}}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60, trust_env=False) as client:
        end = time.monotonic() + seconds
        out.send("started")

        async def reader(path: str) -> None:
            while time.monotonic() < end:
                try:
                    answer = await client.get(path)
                except httpx.HTTPError as exc:
                    counts["failed"] += 1
                    counts["why"][type(exc).__name__] += 1
                    counts["first"].setdefault(type(exc).__name__, f"{exc!r} at {end - time.monotonic():.1f} s to go")
                    continue
                counts["answers" if answer.status_code == 200 else "failed"] += 1
                if answer.status_code != 200:
                    counts["why"][f"HTTP {answer.status_code}"] += 1

        await asyncio.gather(*(reader(PATHS[i % len(PATHS)]) for i in range(clients)))
    return counts


def _flood_process(url: str, clients: int, seconds: float, out: Connection) -> None:
    out.send(asyncio.run(_flood(url, clients, seconds, out)))


def probe(url: str, stop: threading.Event, found: list[float], failed: list[str]) -> None:
    with httpx.Client(timeout=30, trust_env=False) as client:
        while not stop.wait(PROBE_PERIOD):
            started = time.perf_counter()
            try:
                client.get(f"{url}/healthz").raise_for_status()
            except httpx.HTTPError as exc:
                failed.append(f"{type(exc).__name__}: {exc}")
                continue
            found.append(time.perf_counter() - started)


def measure(url: str, clients: int, seconds: float) -> dict[str, Any]:
    """/healthz latency while `clients` readers flood the two answers for `seconds` (0: quiet)."""
    latencies: list[float] = []
    probe_failures: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(target=probe, args=(url, stop, latencies, probe_failures), daemon=True)
    counts: dict[str, Any] = {"answers": 0, "failed": 0, "why": Counter(), "first": {}}
    if clients:
        context = multiprocessing.get_context("spawn")  # never a fork of a process with threads
        receive, send = context.Pipe(duplex=False)
        flood = context.Process(target=_flood_process, args=(url, clients, seconds, send), daemon=True)
        flood.start()
        try:
            if receive.poll(60):
                receive.recv()  # its readers start now: the probe with them
            thread.start()
            if receive.poll(seconds + 120):
                counts = receive.recv()
        finally:
            flood.join(timeout=10)
            if flood.is_alive():
                flood.kill()
                flood.join(timeout=5)
    else:
        thread.start()
        time.sleep(seconds)
    stop.set()
    thread.join(timeout=60)
    ordered = sorted(latencies)
    return {"clients": clients, "probes": len(ordered), "probe_failures": probe_failures, **counts,
            "p50": statistics.median(ordered), "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "max": ordered[-1]}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    workdir = Path(tempfile.mkdtemp(prefix="infermon-flood-"))
    variants = [grown(v1_page(), 1 + 0.002 * i).encode() for i in range(200)]
    try:
        with PageFarm(variants, processes=1, step_seconds=5.0) as farm:
            port = free_port()
            config = monitor_config(farm.urls(args.targets), 5, port, workdir)
            monitor = start_monitor(config, port, workdir, Path(args.root).resolve())
            url = f"http://127.0.0.1:{port}"
            try:
                sizes = {path: len(httpx.get(f"{url}{path}", timeout=60, trust_env=False).content)
                         for path in PATHS}
                print(f"{args.targets} targets; / {sizes['/'] / 1e3:.0f} KB, "
                      f"/api/v1/status {sizes['/api/v1/status'] / 1e3:.0f} KB", flush=True)
                rows = []
                for clients in [0, *args.clients]:
                    rows.append(measure(url, clients, args.seconds))
                    print(row(rows[-1]), flush=True)
                return rows
            finally:
                stop_process(monitor)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def row(result: dict[str, Any]) -> str:
    who = f"{result['clients']} clients" if result["clients"] else "quiet"
    why = ", ".join(f"{n} {reason}: the first {result['first'].get(reason, '')}"
                    for reason, n in result["why"].most_common())
    flood = (f"; the flood got {result['answers']} answers, {result['failed']} failed" + (f" ({why})" if why else "")
             if result["clients"] else "")
    failed = result["probe_failures"]
    said = f", {len(failed)} failed ({failed[0]})" if failed else ""
    return (f"{who:>12}: /healthz p50 {result['p50'] * 1000:.1f} ms, p99 {result['p99'] * 1000:.1f} ms, "
            f"max {result['max'] * 1000:.1f} ms (n={result['probes']}{said}){flood}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--clients", type=lambda text: [int(n) for n in text.split(",")], default=[200, 400],
                        help="the flood's sizes, one run each (comma-separated)")
    parser.add_argument("--seconds", type=float, default=20.0, help="each run's length")
    parser.add_argument("--root", default=str(ROOT), help="the checkout to serve from")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
