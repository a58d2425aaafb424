"""At what request rate does `infermon bench` itself become the bottleneck?

    python -m bench.bench_overhead [--rates 20,50,100,200,400] [--duration 4] [--tokens 32]

The simulator runs in a child process pinned to the second core and answers every request with
a fixed delay (10 ms to the first token, 2 ms a token after, no jitter); the bench client runs
here, pinned to the first core, at Poisson rates rising level by level (the same code path as
`infermon bench run --rate`). Per level it prints the offered and achieved rate, the client's
CPU time per measured request (and the rate one core could carry at that cost), and the
client's TTFT P50/P99 against the engine's own (its histogram, over the same window): the
difference is what the client and the loopback path add. Where the achieved rate falls behind
the offered one, or the added TTFT grows, the client (or the machine) is saturated.

`--clients stream,openai` measures each level with each client, one after the other in the
same session, so they compare on the same machine state: `stream` (the bench's own client and its
default, monitor/loadtest/stream.py) and `openai` (`--client openai`: the openai SDK, as the canary
uses it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from monitor.config import CostSettings
from monitor.cost.prices import PriceBook
from monitor.loadtest.data import load_dataset
from monitor.loadtest.load import Level
from monitor.loadtest.run import BenchConfig, run_bench
from monitor.loadtest.scenario import RequestClass, Scenario
from monitor.sim import DEFAULT_MODEL, EngineConfig, LatencyProfile, SimServer, SimulatedEngine

PREFILL_S, PER_TOKEN_S = 0.010, 0.002


def _pin(core: int) -> None:
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[core % len(cores)]})


def _serve(tokens: int, ready: Any, stop: Any) -> None:
    _pin(1)
    profile = LatencyProfile(prefill_s=PREFILL_S, prefill_per_token_s=0.0, per_token_s=PER_TOKEN_S,
                             output_tokens=(tokens, tokens), jitter=0.0)
    with SimServer(SimulatedEngine(EngineConfig(deterministic=True, min_step_s=0.001), profile)) as server:
        ready.put(server.url)
        stop.wait()


async def _level(url: str, dataset: Path, rate: float, duration_s: float, tokens: int,
                 client: str) -> dict[str, Any]:
    scenario = Scenario("overhead", (RequestClass("chat", 1.0, 200, tokens),), (1,))
    config = BenchConfig(target=url, model=DEFAULT_MODEL, scenario=scenario, dataset=load_dataset(dataset),
                         levels=[Level("rate", rate)], duration_s=duration_s, repeats=1, warmup=20,
                         sample_interval_s=1.0, client="stream" if client == "stream" else "openai")
    cpu_at_start: list[float] = []

    def progress(phase: str, label: str, done: float, finished: int) -> None:
        if phase == "measure" and not cpu_at_start:
            cpu_at_start.append(time.process_time())  # the warm-up and the start-up are not counted

    result = await run_bench(config, None, PriceBook(CostSettings()), progress)
    window = result["levels"][0]["repeats"][0]
    return {"window": window, "cpu_s": time.process_time() - cpu_at_start[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="20,50,100,200,400")
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--clients", default="stream", help="stream, openai or several (stream,openai), "
                                                            "each level in turn")
    parser.add_argument("--loops", default="asyncio", help="asyncio, uvloop or both (asyncio,uvloop), each in turn")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Queue(), context.Event()
    child = context.Process(target=_serve, args=(args.tokens, ready, stop), daemon=True)
    child.start()
    _pin(0)
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "prompts.jsonl"
        dataset.write_text("".join(f'{{"prompt": "question {i}: {"tell me about rivers " * 40}"}}\n'
                                   for i in range(50)))
        url = ready.get(timeout=60)
        print(f"simulator {url}: TTFT {PREFILL_S * 1000:.0f} ms, {args.tokens} tokens at "
              f"{PER_TOKEN_S * 1000:.0f} ms; client pinned to one core, {args.duration:g} s a level\n")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores before the run")
        print(f"{'client':>6} {'loop':>7} {'offered/s':>9} {'achieved/s':>10} {'cpu ms/req':>10} {'1 core/s':>8} "
              f"{'TTFT P50':>9} {'TTFT P99':>9} {'engine P50':>10} {'added P50':>9} {'failed':>6}")
        try:
            for rate, client, loop in ((float(r), c, lp) for r in args.rates.split(",")
                                       for c in args.clients.split(",") for lp in args.loops.split(",")):
                with _client(client), asyncio.Runner(loop_factory=_loop(loop)) as runner:
                    level = runner.run(_level(url, dataset, rate, args.duration, args.tokens, client))
                w = level["window"]
                engine_p50 = (w["engine"].get("ttft_s") or {}).get("p50")
                ttft = w["ttft_s"]
                added = (ttft["p50"] - engine_p50) * 1000 if ttft["p50"] is not None and engine_p50 else float("nan")
                cpu_ms = level["cpu_s"] / max(w["requests"], 1) * 1000
                print(f"{client:>6} {loop:>7} {rate:9.0f} {w['requests_per_s']:10.1f} {cpu_ms:10.2f} "
                      f"{1000 / cpu_ms:8.0f} "
                      f"{(ttft['p50'] or 0) * 1000:7.1f}ms {(ttft['p99'] or 0) * 1000:7.1f}ms "
                      f"{(engine_p50 or 0) * 1000:8.1f}ms {added:7.1f}ms {w['failed']:6d}")
        finally:
            stop.set()
            child.join(10)


def _loop(name: str) -> Any:
    if name == "asyncio":
        return None
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    raise SystemExit(f"--loops: asyncio or uvloop, not {name!r}")


def _client(name: str) -> Any:
    if name in ("stream", "openai"):
        return contextlib.nullcontext()
    raise SystemExit(f"--clients: stream or openai, not {name!r}")


if __name__ == "__main__":
    main()
