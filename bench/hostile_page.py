"""One target whose page carries many series the engine tables do not know: what it costs the others.

A vLLM page plus `--series` lines of a family no engine table names (under the series budget,
`service.max_series_per_target`, so it is parsed). `infermon serve` scrapes `--targets` good
targets, first alone, then with the hostile one beside them, in the same run; for each, /healthz
is probed every 50 ms for `--seconds`, and the hostile target's state, page size and ingest time
are read from /api/v1/status.

    python -m bench.hostile_page [--series 100000] [--targets 50] [--seconds 30] [--parse-workers 0]

Everything it starts (the monitor) is stopped by pid; the page server is a thread of this process.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.render_flood import measure, row, start_monitor
from bench.scale import ROOT, monitor_config, stop_process
from monitor.ports import free_port
from tests.support.pages import v1_page
from tests.support.pageserver import Page, PageServer


def hostile_page(series: int) -> bytes:
    """The V1 page and `series` samples of one family no engine table knows (~60 bytes each)."""
    lines = [v1_page(), "# HELP custom_request_tag_total Requests by a client-chosen tag.",
             "# TYPE custom_request_tag_total counter"]
    lines += [f'custom_request_tag_total{{tag="client-{i:07d}"}} {i % 97}' for i in range(series)]
    return ("\n".join(lines) + "\n").encode()


def wait_scraped(url: str, name: str, deadline_s: float = 120) -> dict[str, Any]:
    """The target's status row once it has been scraped (up, down or refused) at least once."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        rows = httpx.get(f"{url}/api/v1/status", timeout=60, trust_env=False).json()["layers"]["service"]["targets"]
        found = next((r for r in rows if r.get("name") == name), None)
        if found is not None and found.get("last_scrape"):
            return dict(found)
        time.sleep(1)
    raise RuntimeError(f"target {name} was not scraped in {deadline_s} s")


def run(args: argparse.Namespace) -> None:
    good = v1_page().encode()
    page = hostile_page(args.series)
    workdir = Path(tempfile.mkdtemp(prefix="infermon-hostile-"))
    try:
        with PageServer(keep_alive=True) as pages:
            pages.set("/good", Page(good))
            pages.set("/hostile", Page(page))
            print(f"hostile page: {args.series:,} unrecognised series, {len(page) / 1e6:.1f} MB; "
                  f"{args.targets} good targets of {len(good) / 1e3:.0f} KB", flush=True)
            for hostile in (False, True):
                urls = [pages.url(f"/good?t={i}") for i in range(args.targets)]
                port = free_port()
                config = monitor_config(urls, args.interval, port, workdir, args.parse_workers)
                settings = yaml.safe_load(config.read_text())
                if hostile:
                    settings["service"]["targets"].append({"name": "hostile", "url": pages.url("/hostile")})
                config.write_text(yaml.safe_dump(settings))
                monitor = start_monitor(config, port, workdir, ROOT)
                url = f"http://127.0.0.1:{port}"
                try:
                    state = wait_scraped(url, "hostile" if hostile else "t0")
                    result = measure(url, 0, args.seconds)
                    state = wait_scraped(url, "hostile" if hostile else "t0")
                    rows = httpx.get(f"{url}/api/v1/status", timeout=60, trust_env=False).json()["layers"]["service"]
                    up = sum(1 for r in rows["targets"] if r.get("name") != "hostile" and r.get("up"))
                finally:
                    stop_process(monitor)
                label = "with the hostile target" if hostile else "good targets alone"
                print(f"{label}: {row(result).strip()}; good targets up {up}/{args.targets}", flush=True)
                if hostile:
                    keys = ("state", "up", "error", "page_bytes", "scrape_duration_seconds")
                    shown = {key: state.get(key) for key in keys}
                    print(f"  hostile target: {shown}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--series", type=int, default=100_000)
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--interval", type=int, default=5, help="scrape interval, seconds")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long /healthz is probed, each run")
    parser.add_argument("--parse-workers", type=int, default=0)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
