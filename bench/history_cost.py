"""What the long-horizon history costs: disk and memory for N targets, a trend pass, an import.

Each target serves one model on one GPU and exports the monitor's own series for it (the
service quantiles and gauges in the 1m and 5m windows, KV cache, preemptions, the GPU's
utilization, power and SM clock, the model's $/1M tokens and quality figures: `target_samples`);
the history keeps those that `wanted_of(shipped rules, history.series)` matches. Every model is
its own (the per-model series are not shared: the upper bound). Their days are filled with
seasonal 5-minute points (a day and a week in them; the latency of one target in a hundred
creeping +4 %/day over the last 3 days, so the pass has something to find):

- the keeper: the retention's days through `load` (`memory_bytes()`, and the process's RSS
  growth), then one pass of every rule of alerts/trend.yml (`rule.expr.eval(HistoryAt(keeper,
  now))` on one instant shared by the rules, what the embedded evaluator does once per 5-minute
  point) with the tracks built anew (as after each new point) and cached;
- the store: the days written through `HistoryTables.write`, a day at a time (SQLite file size,
  rows, time), then one 5-minute point's write (today's row of every series, as `runtime` does),
  then a restart's read (`runtime`: every stored day of the memory's reach, `HistoryKeeper.load`);
- the import: a real `prometheus` backfilled with two weeks of the series of fewer targets
  (OpenMetrics, a file a UTC day, `promtool tsdb create-blocks-from openmetrics
  --max-block-duration=24h`), then `import_prometheus` into a new SQLite file, and the same range
  queries alone.

Each size is measured in a fresh (spawned) process, so its RSS and peak are its own; times are
wall and CPU (on a shared machine the CPU is the steadier figure).

    python -m bench.history_cost [--targets 1000 100] [--days 35] [--store-days 7]
                                 [--import-targets 100] [--import-days 14] [--no-import]
"""

from __future__ import annotations

import argparse
import math
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TextIO

import httpx
import numpy as np

from monitor.config import DEFAULT_HISTORY_SERIES
from monitor.history.importer import CHUNK, covering, import_prometheus, selector_text
from monitor.history.keeper import HistoryKeeper, Wanted, first_day, memory_days, wanted_of
from monitor.history.store import DAY, SLOTS, STEP, HistoryTables, StoredDay
from monitor.rulefiles.promql import HistoryAt, Sample
from monitor.rulefiles.rules import SHIPPED_DIR, AlertRule, RuleSet, load_rules
from monitor.store.session import Store
from tests.support.pagefarm import process_cpu_seconds
from tests.support.promserver import PrometheusServer

MiB = 1024 * 1024
QUANTILES = ("0.5", "0.9", "0.99")
WINDOWS = ("1m", "5m")
QUANTILE_SCALE = {"0.5": 0.5, "0.9": 0.8, "0.95": 0.9, "0.99": 1.0}
# A plausible level for each series (the value is what a point holds; the cost does not depend on it).
LEVEL = {
    "inference_ttft_seconds": 0.3, "inference_tpot_seconds": 0.02, "inference_e2e_latency_seconds": 6.0,
    "inference_queue_time_seconds": 0.05, "inference_requests_per_second": 12.0,
    "inference_generation_tokens_per_second": 900.0, "inference_request_error_ratio": 0.005,
    "inference_kv_cache_usage_ratio": 0.5, "inference_prefix_cache_hit_ratio": 0.4,
    "inference_gpu_utilization_ratio": 0.7, "inference_gpu_power_watts": 520.0,
    "inference_cost_usd_per_million_tokens": 1.8, "inference_quality_score_mean": 4.2,
    "inference_quality_refusal_ratio": 0.02, "inference_quality_hallucination_ratio": 0.05,
    "inference_quality_output_tokens": 320.0, "inference_preemptions_per_second": 0.1,
    "inference_gpu_sm_clock_hertz": 1.98e9,
}
LATENCY = ("inference_ttft_seconds", "inference_tpot_seconds", "inference_e2e_latency_seconds",
           "inference_queue_time_seconds")
CREEP_EVERY = 100  # one target in this many creeps
CREEP_DAYS = 3
CREEP_PER_DAY = 0.04
SCRAPE = {"job": "infermon", "instance": "monitor:9480"}  # what Prometheus' scrape adds in the import half


def target_samples(index: int) -> dict[str, list[Sample]]:
    """One target's share of the monitor's /metrics: one model on one GPU."""
    target, model = f"t{index}", f"model-{index}"
    out: dict[str, list[Sample]] = {}

    def add(name: str, **labels: str) -> None:
        out.setdefault(name, []).append(({"__name__": name, **labels}, LEVEL[name]))

    for window in WINDOWS:
        for name in LATENCY:
            for quantile in QUANTILES:
                add(name, target=target, model=model, window=window, quantile=quantile)
        for name in ("inference_requests_per_second", "inference_generation_tokens_per_second",
                     "inference_request_error_ratio", "inference_prefix_cache_hit_ratio",
                     "inference_preemptions_per_second"):
            add(name, target=target, model=model, window=window)
        for tokens in ("generated", "all"):
            add("inference_cost_usd_per_million_tokens", model=model, window=window, tokens=tokens)
    add("inference_kv_cache_usage_ratio", target=target, model=model)
    for name in ("inference_gpu_utilization_ratio", "inference_gpu_power_watts", "inference_gpu_sm_clock_hertz"):
        add(name, node=f"node-{index}", gpu="0")
    for name in ("inference_quality_score_mean", "inference_quality_refusal_ratio",
                 "inference_quality_hallucination_ratio"):
        add(name, model=model)
    for quantile in ("0.5", "0.95"):
        add("inference_quality_output_tokens", model=model, quantile=quantile)
    return out


@dataclass(frozen=True)
class Kept:
    """One series the history keeps, with what its points are made of."""

    name: str
    labels: dict[str, str]  # without __name__
    memory_days: int  # days before today the keeper holds it (0: today only)
    level: float
    creeps: bool


def kept_series(wanted: Sequence[Wanted], targets: int, reach_days: int) -> tuple[list[Kept], int]:
    """The series of `targets` targets the history keeps, and how many the targets export
    (`reach_days`: what memory holds of a trend rule's series)."""
    by_name: dict[str, list[Wanted]] = {}
    for item in wanted:
        by_name.setdefault(item.name, []).append(item)
    kept, exported = [], 0
    for index in range(targets):
        for name, samples in target_samples(index).items():
            for labels, value in samples:
                exported += 1
                matched = [w for w in by_name.get(name, ()) if w.matches(labels)]
                if matched:
                    level = value * QUANTILE_SCALE.get(labels.get("quantile", ""), 1.0)
                    kept.append(Kept(name, {k: v for k, v in labels.items() if k != "__name__"},
                                     max(reach_days if w.days is None else w.days for w in matched), level,
                                     name in LATENCY and index % CREEP_EVERY == 0))
    return kept, exported


def day_values(kept: Sequence[Kept], day: int, now: float, rng: np.random.Generator) -> np.ndarray:
    """Every kept series' points of `day` (rows), seasonal, 2 % noise; NaN after `now`."""
    ts = (day * SLOTS + np.arange(SLOTS)) * float(STEP)
    hour = (ts % DAY) / DAY
    weekday = (day + 3) % 7  # 1970-01-01 was a Thursday: 0 is Monday
    shape = (1 + 0.3 * np.sin(2 * np.pi * (hour - 0.25))) * (0.8 if weekday >= 5 else 1.0)
    levels = np.array([k.level for k in kept])
    values = levels[:, None] * shape[None, :] * (1 + 0.02 * rng.uniform(-1, 1, (len(kept), SLOTS)))
    creeping = np.array([k.creeps for k in kept])
    if creeping.any():
        growth = (1 + CREEP_PER_DAY) ** (np.maximum(0.0, ts - (now - CREEP_DAYS * DAY)) / DAY)
        values[creeping] *= growth
    values[:, ts > now] = np.nan
    return values


def stored_days(kept: Sequence[Kept], day: int, now: float, seed: int = 7) -> list[StoredDay]:
    values = day_values(kept, day, now, np.random.default_rng(seed + day))
    return [StoredDay(k.name, k.labels, day, values[i]) for i, k in enumerate(kept)]


def shipped_rules() -> RuleSet:
    return load_rules(sorted(SHIPPED_DIR.glob("*.yml")))


def trend_rules() -> list[AlertRule]:
    """Every rule of alerts/trend.yml."""
    return load_rules([SHIPPED_DIR / "trend.yml"]).rules


def process_memory() -> dict[str, float]:
    """VmRSS and VmHWM (the peak) of this process, in MiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024 / MiB
    return fields


# --- one size, in a fresh process ---------------------------------------------------------------


@dataclass
class Stopwatch:
    """Wall and CPU seconds (this process) of the blocks run under it, added up. On a shared
    machine the CPU is the steadier figure: the wall clock waits for the other processes too."""

    wall: float = 0.0
    cpu: float = 0.0

    @contextmanager
    def running(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.wall += time.perf_counter() - wall
            self.cpu += time.process_time() - cpu


def _days(retention_days: int, now: float) -> range:
    today = int(now // DAY)
    return range(today - retention_days + 1, today + 1)


def measure_keeper(targets: int, retention_days: int, now: float) -> dict[str, Any]:
    """Fill a keeper with the retention's days (it keeps its share), then a trend pass over it."""
    ruleset = shipped_rules()
    wanted = wanted_of(ruleset, DEFAULT_HISTORY_SERIES)
    kept, exported = kept_series(wanted, targets, memory_days(ruleset))
    keeper = HistoryKeeper(wanted, memory_days(ruleset))
    before = process_memory()["VmRSS"]
    load = Stopwatch()
    for day in _days(retention_days, now):
        days = stored_days(kept, day, now)
        with load.running():
            keeper.load(days, now)
    del days
    loaded = process_memory()["VmRSS"]
    rules = trend_rules()
    today = stored_days(kept, int(now // DAY), now)
    cold, fired = [], {}
    for _ in range(3):
        keeper.load(today, now)  # as a new point does: every series' track is built again
        with (watch := Stopwatch()).running():
            instant = HistoryAt(keeper, now)  # one for every rule, as the embedded evaluator reads them
            fired = {rule.name: len(rule.expr.eval(instant)) for rule in rules}
        cold.append(watch)
    after_pass = process_memory()["VmRSS"]
    with (warm := Stopwatch()).running():
        instant = HistoryAt(keeper, now)
        for rule in rules:
            rule.expr.eval(instant)
    return {
        "exported": exported, "kept": len(kept), "in_memory": sum(k.memory_days > 0 for k in kept),
        "memory_days": keeper.memory_days, "keeper_mib": keeper.memory_bytes() / MiB, "load": load,
        "rss_load_mib": loaded - before, "rss_pass_mib": after_pass - loaded, "rules": len(rules),
        "cold": sorted(cold, key=lambda w: w.cpu)[1], "warm": warm,
        "fired": {name: n for name, n in fired.items() if n},
    }


def measure_store(targets: int, retention_days: int, now: float, path: Path) -> dict[str, Any]:
    """Write the retention's days to a new SQLite file, a day at a time; then one 5-minute point's
    write (as `runtime` does when a point closes: today's row of every series, older days dropped)."""
    ruleset = shipped_rules()
    kept, _ = kept_series(wanted_of(ruleset, DEFAULT_HISTORY_SERIES), targets, memory_days(ruleset))
    store = Store(f"sqlite:///{path}")
    tables = HistoryTables(store.engine)
    write = Stopwatch()
    for day in _days(retention_days, now):
        days = stored_days(kept, day, now)
        with write.running():
            tables.write(days)
    today = stored_days(kept, int(now // DAY), now, seed=8)
    with (flush := Stopwatch()).running():
        tables.write(today, first_day(now, retention_days))
    series, rows = tables.size()
    store.engine.dispose()
    return {"series": series, "rows": rows, "write": write, "flush": flush,
            "file_mib": sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / MiB}


def measure_restart(path: Path, now: float) -> dict[str, Any]:
    """What a restart does (`runtime`): read the stored days of the memory's reach, load them."""
    ruleset = shipped_rules()
    store = Store(f"sqlite:///{path}")
    keeper = HistoryKeeper(wanted_of(ruleset, DEFAULT_HISTORY_SERIES), memory_days(ruleset))
    before = process_memory()
    with (read := Stopwatch()).running():
        days = HistoryTables(store.engine).read(first_day(now, keeper.memory_days))
    read_rows = len(days)
    with (load := Stopwatch()).running():
        keeper.load(days, now)
    del days
    after = process_memory()
    store.engine.dispose()
    return {"read_rows": read_rows, "read": read, "restart_load": load,
            "rss_mib": after["VmRSS"] - before["VmRSS"], "peak_mib": after["VmHWM"] - before["VmRSS"]}


def in_fresh_process(func: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(func, *args).result()


def measure_size(targets: int, retention_days: int, store_days: int, now: float, workdir: Path) -> dict[str, Any]:
    path = workdir / f"history-{targets}.db"
    row = {"targets": targets, "days": retention_days, "store_days": store_days}
    row |= in_fresh_process(measure_keeper, targets, retention_days, now)
    row |= in_fresh_process(measure_store, targets, store_days, now, path)
    row |= in_fresh_process(measure_restart, path, now)
    path.unlink()
    return row


# --- the import from a real Prometheus ---------------------------------------------------------


def write_openmetrics(out: TextIO, kept: Sequence[Kept], day: int, start: float, end: float) -> int:
    """The kept series' points of one UTC day within [start, end], as a scrape would have stored
    them (job, instance). A file a day: promtool reads its whole input again for every block."""
    values = day_values(kept, day, end, np.random.default_rng(7 + day))
    ts = (day * SLOTS + np.arange(SLOTS)) * STEP
    inside = (ts >= start) & (ts <= end)
    by_name: dict[str, list[int]] = {}
    for i, k in enumerate(kept):
        by_name.setdefault(k.name, []).append(i)
    samples = 0
    for name, rows in by_name.items():
        out.write(f"# TYPE {name} gauge\n")
        for i in rows:
            text = ",".join(f'{k}="{v}"' for k, v in sorted({**kept[i].labels, **SCRAPE}.items()))
            keep = inside & ~np.isnan(values[i])
            out.write("".join(f"{name}{{{text}}} {value:.6g} {t}\n"
                              for t, value in zip(ts[keep].tolist(), values[i][keep].tolist(), strict=True)))
            samples += int(keep.sum())
    out.write("# EOF\n")
    return samples


def backfill(prom: PrometheusServer, kept: Sequence[Kept], start: float, end: float, workdir: Path) -> dict[str, Any]:
    """Write the points of [start, end] into `prom`'s (stopped) TSDB: OpenMetrics, promtool, a day at a time."""
    samples, om_bytes, om_s, promtool = 0, 0, 0.0, Stopwatch()
    source = workdir / "day.om"
    for day in range(int(start // DAY), int(end // DAY) + 1):
        started = time.perf_counter()
        with source.open("w") as out:
            samples += write_openmetrics(out, kept, day, start, end)
        om_bytes += source.stat().st_size
        om_s += time.perf_counter() - started
        started, children = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                        str(source), str(prom.dir / "data")], check=True, capture_output=True)
        promtool.wall += time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        promtool.cpu += after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    source.unlink()
    return {"om_samples": samples, "om_mib": om_bytes / MiB, "om_s": om_s, "backfill": promtool}


def _query_ranges(url: str, wanted: Sequence[Wanted], start: float, end: float) -> Iterator[int]:
    """The importer's range queries alone, one after another (the same queries, chunks and step): points answered."""
    first, last = math.ceil(start / STEP) * STEP, int(end // STEP) * STEP
    with httpx.Client(base_url=url, timeout=120) as client:
        for item in covering(wanted):  # the selectors the importer asks for
            query = f"avg_over_time({selector_text(item)}[{STEP - 1}s])"
            for chunk_start in range(first, last + 1, CHUNK):
                params = {"query": query, "start": str(chunk_start), "end": str(min(last, chunk_start + CHUNK - STEP)),
                          "step": str(STEP)}
                response = client.get("/api/v1/query_range", params=params)
                response.raise_for_status()
                yield sum(len(series["values"]) for series in response.json()["data"]["result"])


def measure_import(targets: int, days: int, workdir: Path) -> dict[str, Any]:
    """Two weeks of `targets` targets' series in a real Prometheus, imported into a new SQLite file."""
    ruleset = shipped_rules()
    wanted = wanted_of(ruleset, DEFAULT_HISTORY_SERIES)
    kept, _ = kept_series(wanted, targets, memory_days(ruleset))
    end = time.time() - 60
    start = end - days * DAY
    db = workdir / "imported.db"
    prom = PrometheusServer({}, retention="60d")
    row: dict[str, Any] = {"targets": targets, "days": days} | backfill(prom, kept, start, end, workdir)
    with prom:
        assert prom.process is not None
        store = Store(f"sqlite:///{db}")
        prom_cpu = process_cpu_seconds(prom.process.pid)
        with httpx.Client(base_url=prom.url, timeout=120) as client, (imported := Stopwatch()).running():
            done = import_prometheus(client, wanted, start, end, HistoryTables(store.engine))
        row["import_prom_cpu"] = process_cpu_seconds(prom.process.pid) - prom_cpu
        _, rows = HistoryTables(store.engine).size()
        store.engine.dispose()
        prom_cpu = process_cpu_seconds(prom.process.pid)
        with (alone := Stopwatch()).running():
            queries = list(_query_ranges(prom.url, wanted, start, end))
        row["queries_prom_cpu"] = process_cpu_seconds(prom.process.pid) - prom_cpu
    row |= {"series": done.series, "points": done.points, "imported_days": done.days, "import": imported,
            "queries_alone": alone,
            "rows": rows, "db_mib": db.stat().st_size / MiB, "queries": len(queries), "query_points": sum(queries),
            "selectors": len(dict.fromkeys(wanted)), "expected_series": len(kept),
            "expected_points": row["om_samples"]}
    db.unlink()
    return row


# --- the report ---------------------------------------------------------------------------------


def _took(watch: Stopwatch) -> str:
    return f"{watch.wall:,.1f} s ({watch.cpu:,.1f} s CPU)"


def _took_ms(watch: Stopwatch) -> str:
    return f"{watch.wall * 1000:,.0f} ms ({watch.cpu * 1000:,.0f} ms CPU)"


SIZE_ROWS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("series the targets export (of the kinds the history reads)", lambda r: f"{r['exported']:,}"),
    ("series kept (store) / held for days (memory)", lambda r: f"{r['kept']:,} / {r['in_memory']:,}"),
    ("store: days written, rows", lambda r: f"{r['store_days']}, {r['rows']:,}"),
    ("store: SQLite file", lambda r: f"{r['file_mib']:,.0f} MiB ({r['file_mib'] * MiB / r['rows']:,.0f} B a row)"),
    ("store: write, a day at a time", lambda r: f"{_took(r['write'])}, {r['rows'] / r['write'].cpu:,.0f} rows/CPU s"),
    ("store: one 5-minute point (today's row of every series)", lambda r: _took(r["flush"])),
    ("keeper: `load` of the retention", lambda r: _took(r["load"])),
    ("keeper: `memory_bytes()`", lambda r: f"{r['keeper_mib']:,.1f} MiB"),
    ("keeper: RSS growth after `load`", lambda r: f"{r['rss_load_mib']:,.1f} MiB"),
    ("trend pass: RSS growth (tracks built)", lambda r: f"{r['rss_pass_mib']:,.1f} MiB"),
    ("trend pass, tracks built anew (each new point)", lambda r: _took_ms(r["cold"])),
    ("trend pass, tracks cached", lambda r: _took_ms(r["warm"])),
    ("restart: read of the memory's reach", lambda r: f"{r['read_rows']:,} rows, {_took(r['read'])}"),
    ("restart: `load`, RSS after / peak", lambda r: f"{_took(r['restart_load'])}, "
     f"+{r['rss_mib']:,.0f} / +{r['peak_mib']:,.0f} MiB"),
)


def print_sizes(rows: Sequence[dict[str, Any]]) -> None:
    """A markdown table: what is measured down, the sizes across."""
    print("| " + " | ".join(["", *(f"{r['targets']:,} targets" for r in rows)]) + " |")
    print("|" + "---|" * (len(rows) + 1))
    for label, cell in SIZE_ROWS:
        print("| " + " | ".join([label, *(cell(r) for r in rows)]) + " |")
    for r in rows:
        print(f"{r['targets']:,} targets: {r['days']} days filled, {r['memory_days']} days of trend series in memory, "
              f"{r['rules']} trend rules; firing (one target in {CREEP_EVERY} creeps): {r['fired'] or 'none'}")


def print_import(r: dict[str, Any]) -> None:
    print(f"\nimport: {r['targets']:,} targets, {r['days']} days")
    print("| | |\n|---|---|")
    for label, value in (
        ("backfill: OpenMetrics written (a file a day)",
         f"{r['om_samples']:,} samples, {r['om_mib']:,.0f} MiB, {r['om_s']:.1f} s"),
        ("backfill: `promtool tsdb create-blocks-from openmetrics`", _took(r["backfill"])),
        ("`import_prometheus`: series, points, days, rows",
         f"{r['series']:,} ({r['expected_series']:,} kept), {r['points']:,} ({r['expected_points']:,} in "
         f"Prometheus), {r['imported_days']}, {r['rows']:,}"),
        ("`import_prometheus`: time (Prometheus' CPU)", f"{_took(r['import'])} ({r['import_prom_cpu']:.1f} s)"),
        ("its SQLite file", f"{r['db_mib']:,.1f} MiB"),
        (f"the same {r['queries']} range queries alone ({r['selectors']} selectors)",
         f"{_took(r['queries_alone'])} ({r['queries_prom_cpu']:.1f} s), {r['query_points']:,} points"),
    ):
        print(f"| {label} | {value} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--targets", type=int, nargs="+", default=[1000, 100])
    parser.add_argument("--days", type=int, default=35, help="days of 5-minute points (the retention)")
    parser.add_argument("--store-days", type=int, default=None,
                        help="days written to the SQLite file (default: --days; a row a series a day)")
    parser.add_argument("--import-targets", type=int, default=100)
    parser.add_argument("--import-days", type=int, default=14)
    parser.add_argument("--no-import", action="store_true", help="skip the Prometheus import")
    args = parser.parse_args()
    now = time.time()
    with tempfile.TemporaryDirectory(prefix="infermon-history-") as folder:
        workdir = Path(folder)
        rows = []
        for targets in args.targets:
            rows.append(measure_size(targets, args.days, args.store_days or args.days, now, workdir))
            print_sizes(rows[-1:])
        if len(rows) > 1:
            print_sizes(rows)
        if not args.no_import:
            print_import(measure_import(args.import_targets, args.import_days, workdir))


if __name__ == "__main__":
    main()
