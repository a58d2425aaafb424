"""What a daily quality run costs in wall time: 100 samples against a judge that takes 1 s a call.

    python -m bench.quality_judge [--samples 100] [--latency 1.0] [--concurrency 8 16]

The judge is the judge SIMULATOR (monitor/sim/judge.py) in its own process on loopback (so its
CPU is not counted as ours), answering in the OpenAI wire format after `--latency` seconds;
the run is the real one (request-log
source, sampling, redaction, SQLite store, one commit per verdict). Goal: wall time within 15 %
of samples x latency / concurrency. Prints the judge tokens and the cost at the default prices.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from monitor.config import load_settings
from monitor.ports import free_port
from monitor.quality.run import QualityRunner
from monitor.quality.sample import Sample
from monitor.quality.sources.requestlog import RequestLogSource
from monitor.quality.store import QualityStore
from monitor.sim.protocol import filler_text
from monitor.store.session import Store

DAY = "2026-11-29"


def _samples(count: int, start: float) -> list[Sample]:
    return [Sample("bench-model", f"user: question {i} from bench@example.com", filler_text(0, 40 + i * 3),
                   start + i, request_id=f"bench-{i}", output_tokens=40 + i * 3) for i in range(count)]


async def one_run(samples: int, concurrency: int, judge_url: str, directory: Path) -> dict[str, float]:
    settings = load_settings(None, {
        "storage": {"url": f"sqlite:///{directory / f'bench-{concurrency}.db'}"},
        "quality": {"timezone": "UTC", "sample_size": samples,
                    "judge": {"base_url": judge_url, "model": "judge-simulator", "concurrency": concurrency,
                              "timeout": "30s", "api_key_env": "INFERMON_BENCH_NO_KEY"}},
    })
    store = Store(settings.storage.url)
    quality = QualityStore(store.engine)
    from monitor.quality.sampling import day_window

    quality.add_samples(_samples(samples, day_window(DAY, "UTC")[0]))
    runner = QualityRunner(settings.quality, quality, [RequestLogSource(quality)])
    started = time.perf_counter()
    report = await runner.run(DAY)
    wall = time.perf_counter() - started
    summary = quality.done_runs()[0].summary or "{}"
    store.close()
    import json

    numbers = json.loads(summary)
    return {"wall": wall, "calls": report.judge_calls, "errors": numbers["judge_errors"],
            "input_tokens": numbers["judge_input_tokens"], "output_tokens": numbers["judge_output_tokens"],
            "cost": numbers["judge_cost_usd"]}


async def main(samples: int, latency: float, concurrencies: list[int]) -> None:
    port = free_port()
    judge = subprocess.Popen([sys.executable, "-m", "monitor.sim.judge", "--port", str(port),
                              "--latency", str(latency)])
    try:
        await _wait_up(f"http://127.0.0.1:{port}/v1/models")
        with tempfile.TemporaryDirectory() as directory:
            print(f"{samples} samples, judge simulator answering after {latency:g}s a call")
            print(f"{'concurrency':>11} {'wall s':>8} {'ideal s':>8} {'vs ideal':>9} {'rounds s':>9} "
                  f"{'calls':>6} {'errors':>6} {'in tok':>8} {'out tok':>8} {'cost $':>8}")
            for concurrency in concurrencies:
                r = await one_run(samples, concurrency, f"http://127.0.0.1:{port}/v1", Path(directory))
                ideal = samples * latency / concurrency
                rounds = math.ceil(samples / concurrency) * latency  # the floor with whole 1 s calls
                versus = f"{r['wall'] / ideal - 1:>+9.1%}" if ideal else f"{'-':>9}"
                print(f"{concurrency:>11} {r['wall']:>8.2f} {ideal:>8.2f} {versus} "
                      f"{rounds:>9.2f} {r['calls']:>6.0f} {r['errors']:>6.0f} {r['input_tokens']:>8.0f} "
                      f"{r['output_tokens']:>8.0f} {r['cost']:>8.4f}")
    finally:
        judge.terminate()
        judge.wait(timeout=10)


async def _wait_up(url: str) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(200):
            try:
                if (await client.get(url)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"judge simulator did not come up at {url}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 16])
    args = parser.parse_args()
    asyncio.run(main(args.samples, args.latency, args.concurrency))
