"""Scrape + parse + derive of one engine page, side by side with the real Prometheus.

Both scrape the same loopback pages once a second in the same run, each page served by a
process of its own (tests.support.pagefarm): the V1 fixture (55 KB), 8 engines x 4 models (1.09 MB),
and one engine serving 10 models (342 KB, the page of `bench.scale --models 10`). We report
our median collection time per page next to Prometheus' median `scrape_duration_seconds` and
the ratio, then where our time goes: each stage of the scrape path run alone on the last page
fetched (median over repeats): the HTTP fetch, the text check, engine detection (a router's
page ruled out first), the parse, the extraction, the series store, the target's derivation and
the view (the two the ratio covers end there), and the target's part of the /metrics render after
them (`ServiceText`, as `infermon serve` writes it after each scrape).

    python -m bench.service_scrape [--seconds 40] [--models 10] [--pauses]

With `--pauses`, also each page's collection back to back and after a 1 s busy wait, beside the
1 s sleep the ratio's collections follow: what the pause between scrapes costs, and whether an
idle core is why (docs/history/measurements-2026.md, tenth stop).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from pathlib import Path

import httpx

from monitor.config import load_settings
from monitor.exporter import TextWriter
from monitor.health import HealthBook
from monitor.promtext import check_text
from monitor.scrape import fetch_target_page
from monitor.service.collector import ServiceCollector
from monitor.service.engines import detect
from monitor.service.extract import Snapshot, extract
from monitor.service.render import ServiceText
from monitor.service.target import TargetState
from monitor.service.view import ServiceView
from tests.support.pagefarm import PageFarm
from tests.support.pages import fleet_page, grown, v1_page
from tests.support.promserver import PrometheusServer

Stages = dict[str, float]  # stage -> median seconds
REPEATS = 30
PAUSES = ("after sleep", "back to back", "after spin")  # --pauses: what the collection follows


def variants(text: str, count: int) -> list[bytes]:
    return [grown(text, 1 + 0.01 * i).encode() for i in range(count)]


def stages(collector: ServiceCollector, state: TargetState, text: str, openmetrics: bool) -> Stages:
    """Each step of `_ingest` + derive + view on `text`, alone, on the collector's own state."""
    prefix, times = state.target.metric_prefix, {}
    spec = detect(text, prefix, state.target.engine)
    assert spec is not None
    page = state.parser.parse(text, spec.page_names(prefix), openmetrics)
    ts = [state.latest.ts if state.latest else time.time()]

    def snapshot() -> Snapshot:
        ts[0] += 1.0
        return extract(page, spec, ts[0], state.target.model or "unknown", state.memo)

    kept, writer = ServiceText(), TextWriter()

    def render_again(view: ServiceView) -> None:
        kept._targets.clear()  # as after the target's scrape: its lines written anew
        kept.render(view, writer, [])

    steps: dict[str, object] = {
        "check": lambda: check_text(text),
        "detect": lambda: detect(text, prefix, state.target.engine),  # a router's marker: read by the parse
        "parse": lambda: state.parser.parse(text, spec.page_names(prefix), openmetrics),
        "extract": snapshot,
        "store": lambda: state.store.append(snapshot()),  # minus the extract above
        "derive": lambda: collector.pipeline.derive(state, ts[0]),
        "view": lambda: collector.assemble(ts[0]),
        "render": lambda: render_again(collector.view),
    }
    for name, step in steps.items():
        runs = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            step()  # type: ignore[operator]
            runs.append(time.perf_counter() - started)
        times[name] = statistics.median(runs)
    times["store"] = max(0.0, times["store"] - times["extract"])
    return times


async def after(collector: ServiceCollector, pause: str, count: int) -> float:
    """Median collection time right after `pause`: "none" (back to back) or "spin" (a 1 s busy
    wait in this thread: the core never idles, unlike the sleep the ratio's collections follow)."""
    timings = []
    for _ in range(count):
        if pause == "spin":
            until = time.perf_counter() + 1.0
            while time.perf_counter() < until:
                pass
        started = time.perf_counter()
        await collector.collect()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings[2:])


async def measure(url: str, seconds: float, pauses: bool = False) -> tuple[list[float], list[float], Stages]:
    settings = load_settings(None, {"service": {
        "windows": ["1m", "5m"], "targets": [{"name": "bench", "url": url}]}}).service
    async with httpx.AsyncClient(trust_env=False) as client:
        collector = ServiceCollector(settings, client, HealthBook(), own_clients=True)  # as `infermon serve`
        timings = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            await collector.collect()
            timings.append(time.perf_counter() - started)
            await asyncio.sleep(max(0.0, 1.0 - timings[-1]))
        assert collector.targets["bench"].up, collector.targets["bench"].error
        paused = {"after sleep": statistics.median(timings[3:]), "back to back": await after(collector, "none", 40),
                  "after spin": await after(collector, "spin", 12)} if pauses else {}
        pool = collector.targets["bench"].pool
        assert pool is not None
        http = []  # the HTTP path alone, on the same kept-alive connection
        for _ in range(50):
            started = time.perf_counter()
            fetched = await fetch_target_page(pool, url, 10.0, settings.max_page_bytes)
            http.append(time.perf_counter() - started)
        breakdown = {"http": statistics.median(http[5:]),
                     **stages(collector, collector.targets["bench"], fetched.text, fetched.openmetrics)}
        breakdown.update(paused)
        await collector.aclose()
    return timings[3:], http[5:], breakdown  # the first scrapes fill caches and windows


def prometheus_median(prom: PrometheusServer, job: str, seconds: int) -> float:
    """Prometheus' median `scrape_duration_seconds` of `job` over the last `seconds`; on a busy
    machine its first scrapes of a job can come late, so it is asked again for up to 15 s."""
    expr = f'quantile_over_time(0.5, scrape_duration_seconds{{job="{job}"}}[{seconds}s])'
    deadline = time.monotonic() + 15
    while not (result := prom.query(expr)) and time.monotonic() < deadline:
        time.sleep(0.5)
    if not result:
        raise RuntimeError(f"prometheus has no scrape of job {job} in the last {seconds} s")
    return float(result[0]["value"][1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--models", type=int, default=10,
                        help="also a page of one engine serving this many models (#22 item 2's page); 0: none")
    parser.add_argument("--pauses", action="store_true",
                        help="also each page's collection back to back and after a 1 s busy wait")
    parser.add_argument("--json", type=Path,
                        help="also write each page's collection times, fetch times and stages to this file")
    args = parser.parse_args()
    count = int(args.seconds) + 30 + (20 if args.pauses else 0)
    pages = {"/v1": v1_page(), "/fleet": fleet_page()}
    if args.models > 1:
        pages[f"/models{args.models}"] = fleet_page(engines=1, models=args.models)
    with contextlib.ExitStack() as stack:
        # Each page from a process of its own, as an engine is: a server thread in this process
        # would take the GIL from the collector while it answers, a cost Prometheus never sees.
        urls = {path: stack.enter_context(PageFarm(variants(text, count), processes=1, step_seconds=1.0)).urls(1)[0]
                for path, text in pages.items()}
        jobs = {path.strip("/"): [url] for path, url in urls.items()}
        with PrometheusServer(jobs, interval="1s") as prom:
            rows, breakdowns, measured = [], {}, {}
            for path, text in pages.items():
                ours, http, breakdowns[path] = asyncio.run(measure(urls[path], args.seconds / 2, args.pauses))
                measured[path] = {"ours": ours, "http": http, "stages": dict(breakdowns[path])}
                theirs = prometheus_median(prom, path.strip("/"), int(args.seconds))
                rows.append((path, len(text), statistics.median(ours), statistics.median(http), theirs))
    if args.json:
        args.json.write_text(json.dumps(measured))
    # infermon ms: scrape + parse + derive; http ms: the fetch alone; prometheus: scrape_duration_seconds
    print(f"{'page':<10} {'bytes':>9} {'infermon ms':>12} {'http ms':>8} {'prometheus ms':>14} "
          f"{'ratio':>6} {'http ratio':>10}")
    for path, size, ours_s, http_s, theirs_s in rows:
        print(f"{path:<10} {size:>9} {ours_s * 1000:>12.2f} {http_s * 1000:>8.2f} {theirs_s * 1000:>14.2f} "
              f"{ours_s / theirs_s:>6.2f} {http_s / theirs_s:>10.2f}")
    # Where the time goes, stage by stage (ms); `scrape path` sums http..view, what the ratio covers.
    paused = {path: {k: times.pop(k) for k in PAUSES if k in times} for path, times in breakdowns.items()}
    names = list(next(iter(breakdowns.values())))
    print()
    print(f"{'page':<10} " + " ".join(f"{n:>8}" for n in names) + f" {'scrape path':>12}")
    for path, times in breakdowns.items():
        path_s = sum(v for k, v in times.items() if k != "render")
        print(f"{path:<10} " + " ".join(f"{times[n] * 1000:>8.2f}" for n in names) + f" {path_s * 1000:>12.2f}")
    if args.pauses:  # the same collection after a 1 s sleep (the ratio's), none, and a 1 s busy wait
        print()
        print(f"{'page':<10} " + " ".join(f"{n:>13}" for n in PAUSES))
        for path, times in paused.items():
            print(f"{path:<10} " + " ".join(f"{times[n] * 1000:>13.2f}" for n in PAUSES))


if __name__ == "__main__":
    main()
