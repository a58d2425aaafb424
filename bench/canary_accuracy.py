"""How close the canary's client-side numbers come to the delays the simulator was told to use.

    python -m bench.canary_accuracy [--probes 20] [--prefill 0.2] [--per-token 0.02] [--path-delay 0.1]

The simulator (no jitter, fixed answer length) produces the first token PREFILL seconds after a
request arrives and one token every PER_TOKEN seconds after; the canary probes it through the
openai SDK, directly and through a loopback forwarder that delays each direction by PATH_DELAY.
Printed: told vs measured (median, min, max) for TTFT, TPOT and e2e, and the TTFT gap each way.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.sim import DEFAULT_MODEL, EngineConfig, LatencyProfile, SimServer, SimulatedEngine
from tests.support.forwarder import Forwarder

MAX_TOKENS = 32


def _monitor(urls: dict[str, str], metrics_url: str) -> Monitor:
    probes = [{"name": n, "base_url": u, "model": DEFAULT_MODEL, "max_tokens": MAX_TOKENS, "timeout": "10s",
               "target": "sim"} for n, u in urls.items()]
    return Monitor(load_settings(None, {"storage": {"url": "sqlite://"}, "infra": {"nvml": {"enabled": "false"}},
                                        "service": {"targets": [{"name": "sim", "url": metrics_url}]},
                                        "canary": {"probes": probes}}))


async def _measure(monitor: Monitor, probes: int) -> dict[str, dict[str, list[float]]]:
    await monitor.service.collect()
    seen: dict[str, dict[str, list[float]]] = {}
    for name in monitor.canary.probes:
        await monitor.canary.probe_once(name)  # warm-up: the connection, the SDK's first call
        for _ in range(probes):
            result = await monitor.canary.probe_once(name)
            assert result is not None and result.ok, result
            row = seen.setdefault(name, {})
            for key in ("ttft_seconds", "tpot_seconds", "e2e_seconds"):
                row.setdefault(key, []).append(float(getattr(result, key)))
    await monitor.service.collect()
    for name, state in monitor.canary.probes.items():
        gap = monitor.canary.gap(state)
        seen[name]["last_gap_seconds"] = [gap if gap is not None else float("nan")]
    await monitor.aclose()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--prefill", type=float, default=0.2)
    parser.add_argument("--per-token", type=float, default=0.02)
    parser.add_argument("--path-delay", type=float, default=0.1)
    args = parser.parse_args()
    profile = LatencyProfile(prefill_s=args.prefill, prefill_per_token_s=0.0, per_token_s=args.per_token,
                             output_tokens=(4 * MAX_TOKENS, 4 * MAX_TOKENS), jitter=0.0)
    told = {"ttft_seconds": args.prefill, "tpot_seconds": args.per_token,
            "e2e_seconds": args.prefill + (MAX_TOKENS - 1) * args.per_token}
    engine = SimulatedEngine(EngineConfig(deterministic=True, min_step_s=0.001), profile)
    with SimServer(engine) as sim, Forwarder(sim.port, delay_s=args.path_delay) as path:
        urls = {"direct": f"{sim.url}/v1", "slow-path": f"http://127.0.0.1:{path.port}/v1"}
        seen = asyncio.run(_measure(_monitor(urls, sim.metrics_url), args.probes))
    for name, row in seen.items():
        extra = 2 * args.path_delay if name == "slow-path" else 0.0
        print(f"{name} ({args.probes} probes)")
        for key, values in row.items():
            expected = told.get(key, 0.0) + (extra if key in ("ttft_seconds", "e2e_seconds") else 0.0)
            label = f"told {expected:.4f}" if key in told else "        "
            print(f"  {key:<18} {label}  median {statistics.median(values):.4f}  "
                  f"min {min(values):.4f}  max {max(values):.4f}")


if __name__ == "__main__":
    main()
