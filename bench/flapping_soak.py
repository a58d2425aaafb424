"""Targets flapping up and down: does `infermon serve`'s memory level off? (#48 item 9)

A page farm (one forked asyncio process) gives every target its own loopback port. Each target
is up for `--flap` seconds, then down for as long, at its own phase, so flaps are spread evenly:
half the targets go down as a restarting engine does (the port closes, connections are refused,
and the page comes back with its counters from zero), the other half answer HTTP 500. The monitor
is `infermon serve` (run by this module in a child process, so that it can report on itself)
with a short interval and short windows, so that its stores fill in the first minutes and a few
minutes hold hundreds of flaps per target. Alert rules are the shipped ones with `for` cut to
`--rules-for` and a webhook receiver on the farm, so TargetDown fires and resolves on each flap.

The child samples itself every `--every` seconds: RSS, and what each of its containers holds (the
monitor's tables, each target's stores, the process-wide caches). With `--trace` it also runs
tracemalloc (slower, and more memory) and reports, between the end of the warm-up and the end,
the lines that allocated most, and the types whose object counts grew most.

    python -m bench.flapping_soak [--minutes 5] [--targets 200] [--flap 10] [--trace]

What "levels off" means here: RSS's slope over the last third of the run, against the first
third's after the warm-up. Everything it starts (the farm, the monitor) is stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Sized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import httpx
import yaml
from scipy.stats import linregress

from bench.scale import stop_process
from monitor.ports import free_port
from tests.support.pages import grown, v1_page

ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024
STEP = 2.0  # seconds per page variant: counters grow this often
_HEAD = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\n\r\n"
_ERROR = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\nerror"
_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


# -- the flapping farm --------------------------------------------------------------------------

class _Target:
    """One target's schedule: up for `flap` s, down for `flap` s, from its phase."""

    def __init__(self, index: int, count: int, flap: float, start: float) -> None:
        self.refuses = index % 2 == 0  # down: the port closes (an engine restarting); else HTTP 500
        self.flap, self.start = flap, start - index * 2 * flap / count
        self.server: asyncio.base_events.Server | None = None
        self.transports: set[asyncio.Transport] = set()

    def up(self, now: float) -> bool:
        return int((now - self.start) / self.flap) % 2 == 0

    def variant(self, now: float) -> int:
        """The page's age in steps: a restarted engine's counters start again from zero."""
        since = (now - self.start) % (2 * self.flap) if self.refuses else now - self.start
        return int(since / STEP)


class _Answers(asyncio.Protocol):
    def __init__(self, target: _Target, answers: list[bytes]) -> None:
        self.target, self.answers, self.buffer = target, answers, b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.target.transports.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        assert self.transport is not None
        self.target.transports.discard(self.transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, rest = self.buffer.split(b"\r\n\r\n", 1)
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            size = int(length.group(1)) if length else 0
            if len(rest) < size:
                return  # a POST's body still on its way
            self.buffer = rest[size:]
            assert self.transport is not None
            now = time.monotonic()
            if head.startswith(b"POST"):
                self.transport.write(_OK)  # the webhook receiver
            elif self.target.up(now):
                self.transport.write(self.answers[min(self.target.variant(now), len(self.answers) - 1)])
            else:
                self.transport.write(_ERROR)


async def _farm(ports: list[int], hook: int, flap: float, answers: list[bytes], stop: Event) -> None:
    loop, start = asyncio.get_running_loop(), time.monotonic()
    targets = [_Target(i, len(ports), flap, start) for i in range(len(ports))]
    receiver = _Target(0, 1, 1e9, start)
    await loop.create_server(lambda: _Answers(receiver, answers), "127.0.0.1", hook)
    while not stop.is_set():
        now = time.monotonic()
        for target, port in zip(targets, ports, strict=True):
            wanted = not target.refuses or target.up(now)
            if wanted and target.server is None:
                target.server = await loop.create_server(
                    lambda t=target: _Answers(t, answers), "127.0.0.1", port, reuse_address=True)  # type: ignore[misc]
            elif not wanted and target.server is not None:
                target.server.close()  # refused from now on, and the kept-alive connection cut
                for transport in list(target.transports):
                    transport.abort()
                target.server = None
        await asyncio.sleep(0.1)


def _serve(ports: list[int], hook: int, flap: float, answers: list[bytes], stop: Event) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(_farm(ports, hook, flap, answers, stop))


class FlappingFarm:
    def __init__(self, targets: int, flap: float, seconds: float) -> None:
        self.ports = [free_port() for _ in range(targets)]
        self.hook = free_port()
        text = v1_page()
        bodies = [grown(text, 1 + 0.01 * i).encode() for i in range(int(seconds / STEP) + 2)]
        self.answers = [_HEAD.format(len(body)).encode() + body for body in bodies]
        self.flap = flap
        self.context = multiprocessing.get_context("fork")
        self.stop = self.context.Event()
        self.process: multiprocessing.process.BaseProcess | None = None

    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}/metrics" for port in self.ports]

    def __enter__(self) -> FlappingFarm:
        self.process = self.context.Process(
            target=_serve, args=(self.ports, self.hook, self.flap, self.answers, self.stop), daemon=True)
        self.process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        assert self.process is not None
        self.process.join(timeout=5)
        if self.process.is_alive() and self.process.pid is not None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.join(timeout=5)


# -- the monitor, in a child process that reports on itself ------------------------------------

def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def sizes(monitor: Any) -> dict[str, int]:
    """len() of every container the monitor's parts hold, summed over targets; and the caches."""
    from monitor.intern import Interned

    found: dict[str, int] = {}
    parts = {name: value for name, value in vars(monitor).items() if hasattr(value, "__dict__")}
    for part_name, part in [("monitor", monitor), *parts.items()]:
        for name, value in vars(part).items():
            if isinstance(value, Sized) and not isinstance(value, str | bytes):
                found[f"{part_name}.{name}"] = len(value)
    for state in list(monitor.service.targets.values()):
        for name, value in vars(state).items():
            inner = [(name, value)] + [(f"{name}.{k}", v) for k, v in getattr(value, "__dict__", {}).items()]
            for key, each in inner:
                if isinstance(each, Sized) and not isinstance(each, str | bytes):
                    found[f"target.{key}"] = found.get(f"target.{key}", 0) + len(each)
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("monitor"):
            continue
        for name, value in list(vars(module).items()):
            if isinstance(value, Interned):
                found[f"{module_name}.{name}"] = len(value)
            elif hasattr(value, "cache_info") and getattr(value, "__module__", None) == module_name:
                found[f"{module_name}.{name}()"] = value.cache_info().currsize
    return found


def type_counts() -> Counter[str]:
    """Objects per type, the frozen ones included (gc.get_objects() leaves the frozen out)."""
    gc.unfreeze()
    try:
        return Counter(type(o).__name__ for o in gc.get_objects())
    finally:
        gc.freeze()


def child(config: Path, out: Path, every: float, warmup: float, until: float, trace: bool) -> None:
    import uvicorn

    from monitor.app import create_app
    from monitor.cli import _logging, _settings
    from monitor.logfilter import install
    from monitor.runtime import Monitor
    from monitor.server import uvicorn_config

    if trace:
        tracemalloc.start(1)
    settings = _settings(config)
    _logging(settings.server.log_level)
    monitor = Monitor(settings, config_path=config)
    server = uvicorn.Server(uvicorn_config(create_app(monitor), settings.server))
    install(settings.server.log_repeat_window.seconds)
    started, done = time.monotonic(), threading.Event()
    marks: dict[str, Any] = {}

    def sample() -> None:
        with out.open("a") as sink:
            while not done.wait(every):
                at = time.monotonic() - started
                row = {"t": at, "rss": rss_bytes(), "sizes": sizes(monitor),
                       "traced": tracemalloc.get_traced_memory()[0] if trace else None}
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                if trace and "snapshot" not in marks and at >= warmup:
                    marks["snapshot"], marks["types"] = tracemalloc.take_snapshot(), type_counts()
                elif trace and "snapshot" in marks and at >= until:
                    grew = tracemalloc.take_snapshot().compare_to(marks["snapshot"], "lineno")[:25]
                    types = type_counts()
                    types.subtract(marks["types"])
                    sink.write(json.dumps({"top": [str(stat) for stat in grew],
                                           "types": types.most_common(15)}) + "\n")
                    return

    threading.Thread(target=sample, daemon=True).start()
    server.run()
    done.set()


# -- the run ------------------------------------------------------------------------------------

def shortened_rules(workdir: Path, for_: str) -> list[str]:
    """The shipped rule files, every `for:` set to `for_` (a flap then fires and resolves alerts)."""
    files = []
    for path in sorted((ROOT / "alerts").glob("*.yml")):
        copy = workdir / path.name
        copy.write_text(re.sub(r"(?m)^(\s+for:) \S+", rf"\1 {for_}", path.read_text()))
        files.append(str(copy))
    return files


def monitor_config(args: argparse.Namespace, farm: FlappingFarm, port: int, workdir: Path) -> Path:
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "warning"},
        "storage": {"url": f"sqlite:///{workdir / 'infermon.db'}"},
        "service": {"scrape_interval": f"{args.interval}s", "windows": ["30s"], "baseline_window": "1m",
                    "targets": [{"name": f"t{i}", "url": url} for i, url in enumerate(farm.urls())]},
        "alerting": {"evaluation_interval": f"{args.interval}s",
                     "rules_files": shortened_rules(workdir, args.rules_for),
                     "receivers": [{"name": "hook", "type": "webhook", "url": f"http://127.0.0.1:{farm.hook}/hook",
                                    "group_wait": "1s", "group_interval": "5s"}]},
    }
    path = workdir / "infermon.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def slope(rows: list[dict[str, Any]], key: str) -> float:
    """Least-squares slope of rows[key] in MiB per minute."""
    if len(rows) < 2:
        return float("nan")
    fit = linregress([r["t"] / 60 for r in rows], [r[key] / MiB for r in rows])
    return float(fit.slope)


def report(rows: list[dict[str, Any]], end: dict[str, Any] | None, warmup: float) -> str:
    lines = [f"{'min':>5} {'RSS MiB':>8}" + (f" {'traced MiB':>11}" if rows[0]["traced"] is not None else "")]
    for row in rows:
        traced = f" {row['traced'] / MiB:>11.1f}" if row["traced"] is not None else ""
        lines.append(f"{row['t'] / 60:>5.1f} {row['rss'] / MiB:>8.1f}{traced}")
    measured = [r for r in rows if r["t"] >= warmup]
    third = max(2, len(measured) // 3)
    keys = ["rss"] + (["traced"] if rows[0]["traced"] is not None else [])
    for key in keys:
        lines.append(f"{key} slope, MiB/min: first third after warm-up {slope(measured[:third], key):+.2f}, "
                     f"last third {slope(measured[-third:], key):+.2f}")
    first, last = measured[0]["sizes"], measured[-1]["sizes"]
    grew = sorted(((last.get(k, 0) - first.get(k, 0), k) for k in set(first) | set(last)), reverse=True)
    lines.append("containers that grew after the warm-up (len at warm-up -> end): " + ", ".join(
        f"{k} {first.get(k, 0)} -> {last.get(k, 0)}" for d, k in grew[:12] if d > 0))
    if end is not None:
        lines += ["tracemalloc, end vs warm-up, top lines:", *end["top"],
                  "object counts that grew: " + ", ".join(f"{t} {n:+d}" for t, n in end["types"])]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> str:
    seconds = args.minutes * 60
    workdir = Path(tempfile.mkdtemp(prefix="infermon-flap-"))
    out = workdir / "samples.jsonl"
    with FlappingFarm(args.targets, args.flap, seconds + 60) as farm:
        port = free_port()
        config = monitor_config(args, farm, port, workdir)
        command = [sys.executable, "-m", "bench.flapping_soak", "--child", str(config), "--out", str(out),
                   "--every", str(args.every), "--warmup", str(args.warmup), "--minutes", str(args.minutes)]
        command += ["--trace"] if args.trace else []
        with (workdir / "infermon.log").open("wb") as log:
            monitor = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and monitor.poll() is None:
                time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
            while args.trace and monitor.poll() is None and '"top"' not in out.read_text():
                if time.monotonic() > deadline + 300:  # the last snapshot and its comparison: a minute or two
                    break
                time.sleep(2)
            if monitor.poll() is None:
                status = httpx.get(f"http://127.0.0.1:{port}/api/v1/status", timeout=30).json()
                flaps = sum(c["failures"] for c in status["collectors"] if c["collector"] == "service")
                print(f"scrapes failed so far (target down): {flaps}", flush=True)
        finally:
            stop_process(monitor)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    rows = [r for r in records if "t" in r]
    end = next((r for r in records if "top" in r), None)
    if not rows:
        raise RuntimeError(f"no samples: {(workdir / 'infermon.log').read_text()[-2000:]}")
    shutil.rmtree(workdir, ignore_errors=True)
    return report(rows, end, args.warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--flap", type=float, default=10, help="seconds up, then as many down")
    parser.add_argument("--interval", type=int, default=1, help="scrape and evaluation interval, seconds")
    parser.add_argument("--rules-for", default="3s", help="every alert rule's `for`")
    parser.add_argument("--every", type=float, default=15, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=150, help="the stores fill: window 30 s + two 1-min baselines")
    parser.add_argument("--trace", action="store_true", help="tracemalloc and object counts in the monitor")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.out, args.every, args.warmup, args.minutes * 60 - args.every, args.trace)
        return
    print(run(args), flush=True)


if __name__ == "__main__":
    main()
