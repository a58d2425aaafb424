"""What one target costs in memory once its windows and baseline are full (the steady state).

`bench.scale` runs for minutes, but a target's baseline store keeps one baseline window of
every scrape (an hour at the shipped 1h), and its throughput counter two, so its RSS says little
about a monitor that has run for a day. This feeds one target's state the scrapes of that whole span at the shipped
settings (15 s, 1m and 5m windows, 1h baseline), each parsed, stored and derived as
`infermon serve` does, then reports what the target holds: its two series stores' arrays and
everything it allocated (tracemalloc: parser caches, the last snapshot, the derived numbers),
and that times 1,000 targets; then what a replica of it (a second target, the same pages) adds.

    python -m bench.target_memory [--models 1 10] [--hours 2.2] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import tracemalloc
from pathlib import Path

import httpx

from monitor.config import load_settings
from monitor.health import HealthBook
from monitor.service.collector import ServiceCollector
from tests.support.pages import fleet_page, grown, v1_page

MiB = 1024 * 1024


def steady_scrapes(collector: ServiceCollector) -> int:
    """Scrapes until the baseline store drops columns: its retention, plus one trim batch."""
    settings = collector.settings
    interval = settings.scrape_interval.seconds
    longest = max(w.seconds for w in collector.windows)
    return math.ceil((longest + 2 * settings.baseline_window.seconds + interval) / interval) + 17


def measure(models: int, hours: float | None) -> dict[str, float]:
    """One target fed its whole retention, then a replica of it (another target, the same pages):
    what each allocated. The first pays for what a process keeps once (line heads, series keys);
    the replica is what each further target serving the same model costs."""
    text = v1_page() if models == 1 else fleet_page(engines=1, models=models)
    targets = [{"name": name, "url": "http://127.0.0.1:9/metrics"} for name in ("t", "replica")]
    settings = load_settings(None, {"service": {"targets": targets}})
    collector = ServiceCollector(settings.service, httpx.AsyncClient(), HealthBook())
    interval = settings.service.scrape_interval.seconds
    scrapes = steady_scrapes(collector) if hours is None else math.ceil(hours * 3600 / interval)
    pages = [grown(text, 1 + 0.001 * i) for i in range(scrapes)]
    allocated = {}
    for name in ("t", "replica"):
        target = collector.targets.pop(name).target
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        state = collector.targets[name] = collector.pipeline.new_state(target)
        for i, page in enumerate(pages):
            collector.pipeline.ingest_and_derive(state, page, False, 1.8e9 + i * interval, 0.0)
        del page
        gc.collect()  # what a cycle left is garbage, not the target's
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        allocated[name] = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
        assert state.derived is not None and state.derived.stats, "the target's numbers were derived"
    state = collector.targets["t"]
    return {
        "models": models,
        "scrapes": scrapes,
        "series": len(state.store.keys),
        "columns": len(state.store.times),
        "baseline_series": len(state.baseline.keys),
        "baseline_columns": len(state.baseline.times),
        "store_mib": state.store.nbytes() / MiB,
        "baseline_mib": state.baseline.nbytes() / MiB,
        "target_mib": allocated["t"] / MiB,
        "replica_mib": allocated["replica"] / MiB,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--hours", type=float, default=None, help="scrapes to feed (default: to the steady state)")
    parser.add_argument("--json", type=Path, help="also write each row, as measured, to this file")
    args = parser.parse_args()
    rows = []
    print(f"{'models':>6} {'scrapes':>7} {'series':>7} {'baseline':>9} {'store MiB':>10} {'baseline MiB':>13} "
          f"{'target MiB':>11} {'replica MiB':>12} {'x1000 GiB':>10}")
    for models in args.models:
        row = measure(models, args.hours)
        rows.append(row)
        print(f"{row['models']:>6} {row['scrapes']:>7} {row['series']:>7} {row['baseline_series']:>9} "
              f"{row['store_mib']:>10.2f} {row['baseline_mib']:>13.2f} {row['target_mib']:>11.2f} "
              f"{row['replica_mib']:>12.2f} {row['target_mib'] * 1000 / 1024:>10.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
