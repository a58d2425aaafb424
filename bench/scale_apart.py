"""`bench.scale`'s two sides one after the other, each alone on the machine, in one run.

Side by side on a machine with few cores, each process takes the other's CPU, and at 1,000
ten-model targets Prometheus with the recording rules does not fit beside the monitor on 2 cores
at all. Here the monitor runs first (`bench.scale --alone`), then Prometheus with the same rules
scrapes the same page farm, and the ratios are taken between the two runs.

Prometheus' rules are what cost it most. When its rule groups miss iterations
(`prometheus_rule_group_iterations_missed_total`), it did not keep up: it wanted more CPU than it
used. Then its CPU is a floor of its demand, and the CPU ratio printed is a ceiling ("at most").

    python -m bench.scale_apart [--targets 1000] [--models 10] [--seconds 200] [--warmup 80] [--json PATH]
    python -m bench.scale_apart --report PATH      # a run's --json file, reported again
                                [--parse-workers 2]

Everything it starts (page farm processes, prometheus, the monitor) is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import httpx

from bench.scale import RulesPrometheus, page_variants, prom_value, scale_arguments
from bench.scale import report as monitor_report
from bench.scale import run as run_monitor
from tests.support.pagefarm import PageFarm, process_cpu_seconds, process_rss_bytes

MiB = 1024 * 1024


def run_prometheus(args: argparse.Namespace) -> dict[str, Any]:
    """Prometheus with the recording rules alone on the machine: the same targets and pages as the
    monitor's run, measured over the same window after the same warm-up."""
    step = 5.0
    with PageFarm(page_variants(args, step), processes=args.processes, step_seconds=step) as farm, \
            RulesPrometheus(farm.urls(args.targets), f"{args.interval}s") as prom:
        assert prom.process is not None
        pid = prom.process.pid
        time.sleep(args.warmup)
        cpu0, missed0, started = process_cpu_seconds(pid), missed_iterations(prom.url), time.monotonic()
        time.sleep(args.seconds - args.warmup)
        elapsed = time.monotonic() - started
        groups = httpx.get(f"{prom.url}/api/v1/rules", timeout=60).json()["data"]["groups"]
        return {
            "cpu": (process_cpu_seconds(pid) - cpu0) / elapsed,
            "rss": process_rss_bytes(pid),
            "up": int(prom_value(prom, 'count(up{job="engines"} == 1)') or 0),
            "series": int(prom_value(prom, "count(inference_requests_per_second)") or 0),
            "rule_eval_s": sum(group["evaluationTime"] for group in groups),
            "slowest_group_s": max((group["evaluationTime"] for group in groups), default=0.0),
            "missed": missed_iterations(prom.url) - missed0,
            "elapsed": elapsed,
        }


def missed_iterations(url: str) -> int:
    """Prometheus' own count of rule group evaluations skipped because the last one ran too long."""
    text = httpx.get(f"{url}/metrics", timeout=60).text
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("prometheus_rule_group_iterations_missed_total")))


def report(monitor: dict[str, Any], prometheus: dict[str, Any]) -> str:
    cpu, rss = monitor["cpu"]["infermon"], monitor["rss"]["infermon"]
    kept_up = prometheus["missed"] == 0
    cpu_ratio = cpu / max(prometheus["cpu"], 1e-9)
    rss_ratio = rss / max(prometheus["rss"], 1)
    lines = [
        monitor_report(monitor),
        "",
        f"then Prometheus + the recording rules alone, the same {monitor['targets']} targets, measured over "
        f"{prometheus['elapsed']:.0f} s after the warm-up:",
        f"  targets up {prometheus['up']}, requests/s series {prometheus['series']}",
        f"  CPU {prometheus['cpu']:.0%} of one core, RSS {prometheus['rss'] / MiB:.0f} MiB",
        f"  rule groups: {prometheus['rule_eval_s']:.1f} s of evaluation a round (the slowest group "
        f"{prometheus['slowest_group_s']:.1f} s, at {monitor['interval']} s intervals), "
        f"{prometheus['missed']} iterations missed in the window",
        (f"ratios: CPU {cpu_ratio:.2f}x (goal <= 0.5), RSS {rss_ratio:.2f}x (goal <= 0.33)" if kept_up else
         f"ratios: CPU at most {cpu_ratio:.2f}x (goal <= 0.5; Prometheus did not keep up, so it wanted more "
         f"than the {prometheus['cpu']:.0%} it used), RSS {rss_ratio:.2f}x (goal <= 0.33)"),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = scale_arguments(__doc__.split("\n", 1)[0], models=10, seconds=200, warmup=80, parse_workers=2,
                             reads=0)
    parser.add_argument("--report", type=Path, help="run nothing: report the run this --json file holds")
    args = parser.parse_args()
    if args.report:
        sides = json.loads(args.report.read_text())
        print(report(sides["monitor"], sides["prometheus"]))
        return
    if args.seconds <= args.warmup:
        parser.error("--seconds must exceed --warmup")
    args.alone = True
    monitor = run_monitor(args)
    prometheus = run_prometheus(args)
    if args.json:
        args.json.write_text(json.dumps({"monitor": monitor, "prometheus": prometheus}))
    print(report(monitor, prometheus))


if __name__ == "__main__":
    main()
