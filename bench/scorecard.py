"""`python -m bench.scorecard`: every fault scenario of tests/support/scenarios.py, then the healthy run,
and the table (alert recall and precision, cause accuracy, false alerts per healthy hour).

    python -m bench.scorecard                      # scenarios at speed 10, a 10-minute healthy run in real time
    python -m bench.scorecard --speed 30 --healthy-speed 30 --only error_burst,target_down
    python -m bench.scorecard --only slow_kv_tier,healthy_kv_tier     # a KV tier's rows (#45)

`--speed` compresses the monitor's clock (see tests/support/scenarios.py); the healthy run defaults to
real time, the demo's load for `--healthy-minutes`. Writes the table to stdout (markdown) and,
with `--json PATH`, every transition of every scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

from tests.support.scenarios import HEALTHY, QUIET, SCENARIOS, Outcome, run_scenario, score, table


async def run(names: set[str] | None, speed: float, healthy_speed: float, healthy_minutes: float) -> list[Outcome]:
    outcomes = []
    # The healthy serving shapes (a KV tier, a P/D split, MoE) at `healthy_speed`'s pace, capped as they say.
    chosen = [s for s in (*SCENARIOS, *QUIET) if names is None or s.name in names]
    if names is None or "healthy" in names:
        chosen.append(dataclasses.replace(HEALTHY, healthy_s=healthy_minutes * 60))
    for scenario in chosen:
        started = time.monotonic()
        outcome = await run_scenario(scenario, speed if scenario.faults else healthy_speed)
        fired = ", ".join(sorted(outcome.fired() | {t.name for t in outcome.false_alerts})) or "no alert"
        print(f"{scenario.name}: {fired} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
        outcomes.append(outcome)
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speed", type=float, default=10.0, help="monitor seconds per real second (scenarios)")
    parser.add_argument("--healthy-speed", type=float, default=1.0, help="the same for the healthy run")
    parser.add_argument("--healthy-minutes", type=float, default=10.0, help="monitor minutes of the healthy run")
    parser.add_argument("--only", default="", help="comma-separated scenario names (and/or 'healthy')")
    parser.add_argument("--json", type=Path, help="write every transition here")
    args = parser.parse_args()
    names = {n.strip() for n in args.only.split(",") if n.strip()} or None
    outcomes = asyncio.run(run(names, args.speed, args.healthy_speed, args.healthy_minutes))
    print(f"speed {args.speed:g} (healthy run {args.healthy_speed:g}, {args.healthy_minutes:g} min)\n")
    print(table(outcomes))
    if args.json:
        args.json.write_text(json.dumps([{"scenario": o.scenario.name, "fault_at": o.fault_at, "clear_at": o.clear_at,
                                          "drained_at": o.drained_at,
                                          "transitions": [dataclasses.asdict(t) for t in o.transitions]}
                                         for o in outcomes], indent=1))
    total = score(outcomes)
    sys.exit(0 if total.recall == 1 and total.precision >= 0.95 and total.cause_accuracy >= 0.9
             and total.false_alerts == 0 else 1)


if __name__ == "__main__":
    main()
