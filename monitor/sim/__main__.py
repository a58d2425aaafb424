"""`python -m monitor.sim --port P [--rps R] [--duration S]`: run the vLLM V1 simulator alone.

With --rps it also drives itself with the load generator; with --duration it stops after
that many seconds (otherwise it serves until Ctrl+C).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections import deque

from monitor.sim.engine import DEFAULT_MODEL, EngineConfig, SimulatedEngine
from monitor.sim.faults import FaultSchedule, demo_schedule
from monitor.sim.load import LoadConfig, run_load
from monitor.sim.server import serve
from monitor.sim.tiers import HostTier, MoeProfile, PdSplit


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m monitor.sim", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--rps", type=float, default=0.0, help="self-generated load (0: none)")
    parser.add_argument("--duration", type=float, default=None, help="seconds, then exit")
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiplies latencies")
    parser.add_argument("--seed", type=int, default=None, help="deterministic draws")
    parser.add_argument("--demo-faults", action="store_true", help="loop the demo faults")
    parser.add_argument("--host-tier", action="store_true", help="a host-memory KV tier (monitor.sim.tiers)")
    parser.add_argument("--pd", action="store_true", help="the decode side of a prefill/decode split")
    parser.add_argument("--moe", action="store_true", help="an MoE model under expert parallelism")
    parser.add_argument("--page", choices=("vllm", "sglang"), default="vllm", help="whose /metrics page to serve")
    return parser


async def _main(args: argparse.Namespace) -> None:
    config = EngineConfig(model_name=args.model, time_scale=args.time_scale,
                          deterministic=args.seed is not None, seed=args.seed or 0,
                          host_tier=HostTier() if args.host_tier else None, pd=PdSplit() if args.pd else None,
                          moe=MoeProfile() if args.moe else None, page=args.page)  # fmt: skip
    faults = demo_schedule() if args.demo_faults else FaultSchedule()
    sim = SimulatedEngine(config, faults=faults)
    started = asyncio.Event()
    server = asyncio.create_task(serve(sim, args.host, args.port, started=started))
    await started.wait()
    print(f"vLLM V1 simulator on http://{args.host}:{args.port} (metrics at /metrics)")
    try:
        if args.rps > 0:
            load = LoadConfig(rps=args.rps, duration_s=args.duration or 3600.0, seed=args.seed)
            summary = await run_load(f"http://{args.host}:{args.port}", load)
            counts = {k: v for k, v in vars(summary).items() if not isinstance(v, deque)}
            print(json.dumps(counts, default=str))
        elif args.duration is not None:
            await asyncio.sleep(args.duration)
        else:
            await server
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


def main() -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(_parser().parse_args()))


if __name__ == "__main__":
    main()
