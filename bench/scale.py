"""N engine targets at 15 s: `infermon serve` beside the real Prometheus with the generated rules.

Both scrape the same pages (the V1 fixture, 55 KB, counters growing; with `--models N` one
engine serving N models, every vLLM family once per model) from a page farm of a few asyncio
processes; Prometheus loads deploy/prometheus/recording.yml, so it computes the same
service series the monitor does. After a warm-up, both are measured side by side: targets up,
CPU (share of one core), RSS, and the latency of /healthz and /metrics, probed all along.

    python -m bench.scale [--targets 1000] [--models 10] [--seconds 240] [--warmup 90]

Everything it starts (page farm processes, prometheus, the monitor) is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from monitor.ports import free_port
from tests.support.pagefarm import PageFarm, process_cpu_seconds, process_rss_bytes
from tests.support.pages import fleet_page, grown, v1_page
from tests.support.promserver import PrometheusServer

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "recording.yml"
TRACE = ROOT / "tests" / "fixtures" / "nvml_h200_trace.json"  # the infra layer plays 8 H200s, every 5 s


class RulesPrometheus(PrometheusServer):
    """Prometheus scraping every page with a `target` label per target, loading the recording rules."""

    def __init__(self, urls: list[str], interval: str) -> None:
        super().__init__({}, interval=interval)
        self.urls = urls

    def _config(self) -> dict[str, Any]:
        groups = []
        for i, url in enumerate(self.urls):
            parsed = httpx.URL(url)
            groups.append({"targets": [f"{parsed.host}:{parsed.port}"],
                           "labels": {"target": f"t{i}", "__metrics_path__": parsed.path}})
        return {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": "engines", "scrape_interval": self.interval,
                                "scrape_timeout": _timeout(self.interval), "static_configs": groups}],
        }


def _timeout(interval: str) -> str:
    """10 s, or the interval when shorter (Prometheus refuses a timeout above the interval)."""
    return f"{min(10, int(interval.removesuffix('s')))}s"


@dataclass
class Probe:
    """Latency of GETs to one URL, taken every `period` seconds on a thread until stopped."""

    url: str
    period: float
    seconds: list[float] = field(default_factory=list)
    failures: int = 0

    def run(self, stop: threading.Event) -> None:
        with httpx.Client(timeout=10, trust_env=False) as client:
            while not stop.wait(self.period):
                started = time.perf_counter()
                try:
                    client.get(self.url).raise_for_status()
                except httpx.HTTPError:
                    self.failures += 1
                    continue
                self.seconds.append(time.perf_counter() - started)

    def summary(self) -> str:
        if not self.seconds:
            return f"no answer ({self.failures} failed)"
        ordered = sorted(self.seconds)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        failed = f", {self.failures} failed" if self.failures else ""
        return f"{statistics.median(ordered) * 1000:.1f} / {p99 * 1000:.1f} ms (n={len(ordered)}{failed})"


def monitor_config(urls: list[str], interval: int, port: int, workdir: Path, parse_workers: int = 0) -> Path:
    config = {
        "server": {"host": "127.0.0.1", "port": port, "log_level": "warning"},
        "storage": {"url": f"sqlite:///{workdir / 'infermon.db'}"},
        "infra": {"interval": "5s", "replay": {"file": str(TRACE)}},
        "service": {"scrape_interval": f"{interval}s", "parse_workers": parse_workers,
                    "targets": [{"name": f"t{i}", "url": url} for i, url in enumerate(urls)]},
    }
    path = workdir / "infermon.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_monitor(config: Path, port: int, workdir: Path) -> subprocess.Popen[bytes]:
    with (workdir / "infermon.log").open("wb") as log:  # the child writes its own copy of the fd
        process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "serve", "-c", str(config)],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.3)
    stop_process(process)
    raise RuntimeError(f"infermon did not start: {(workdir / 'infermon.log').read_text()[-2000:]}")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def monitor_up(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("inference_target_up{") and line.endswith(" 1.0"))


def fresh_metrics(url: str, within: float = 10.0) -> str:
    """The monitor's /metrics once none of its targets is stale (bounded: the last page read). A
    target not scraped for two intervals counts as up but has no derived series: on a busy machine
    (the operator reads just before, parse workers at nice 5) all of them were, and the page had
    3 targets up and no requests/s series."""
    deadline = time.monotonic() + within
    while True:
        text = httpx.get(f"{url}/metrics", timeout=30).text
        stale = [line for line in text.splitlines() if line.startswith("inference_target_stale{")
                 and not line.endswith(" 0.0")]
        if not stale or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


def infra_runs(url: str) -> int:
    """How many times the infra layer has run (the runs of its first GPU)."""
    collectors = httpx.get(f"{url}/api/v1/status", timeout=30).json()["collectors"]
    return max((c["runs"] for c in collectors if c["collector"] == "infra"), default=0)


def prom_value(prom: PrometheusServer, expr: str) -> float | None:
    result = prom.query(expr)
    return float(result[0]["value"][1]) if result else None


def page_variants(args: argparse.Namespace, step: float) -> list[bytes]:
    """The run's pages, one for each `step` seconds and some to spare, their counters growing."""
    base = v1_page() if args.models == 1 else fleet_page(engines=1, models=args.models)
    return [grown(base, 1 + 0.002 * i).encode() for i in range(int(args.seconds / step) + 40)]


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="infermon-scale-"))
    step = 5.0
    variants = page_variants(args, step)
    with PageFarm(variants, processes=args.processes, step_seconds=step) as farm:
        urls = farm.urls(args.targets)
        port = free_port()
        config = monitor_config(urls, args.interval, port, workdir, args.parse_workers)
        beside = contextlib.nullcontext() if args.alone else RulesPrometheus(urls, f"{args.interval}s")
        with beside as prom:
            monitor = start_monitor(config, port, workdir)
            try:
                return measure(args, farm, prom, monitor, f"http://127.0.0.1:{port}")
            finally:
                stop_process(monitor)
                shutil.rmtree(workdir, ignore_errors=True)


def measure(args: argparse.Namespace, farm: PageFarm, prom: PrometheusServer | None,
            monitor: subprocess.Popen[bytes], url: str) -> dict[str, Any]:
    pids = {"infermon": monitor.pid}
    probes = {("infermon", "/healthz"): Probe(f"{url}/healthz", 0.5),
              ("infermon", "/metrics"): Probe(f"{url}/metrics", 1.0)}
    if prom is not None:
        assert prom.process is not None
        pids["prometheus"] = prom.process.pid
        probes[("prometheus", "/healthz")] = Probe(f"{prom.url}/-/healthy", 0.5)
        probes[("prometheus", "/metrics")] = Probe(f"{prom.url}/metrics", 1.0)
    time.sleep(args.warmup)
    # The monitor's parse workers (`--parse-workers`) count as the monitor: its CPU and RSS are theirs too.
    # Each starts with its first page (an interpreter and the monitor's imports: seconds on a busy
    # machine): measured once they all run, or after 30 s with those that do.
    expected, deadline = min(args.parse_workers, args.targets), time.monotonic() + 30
    while True:
        workers = httpx.get(f"{url}/api/v1/status", timeout=30).json()["layers"]["service"]["parse_workers"]
        if not workers or len(workers["pids"]) >= expected or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    group = {"infermon": [monitor.pid, *(workers["pids"] if workers else [])]}
    if prom is not None:
        group["prometheus"] = [pids["prometheus"]]
    stop = threading.Event()
    threads = [threading.Thread(target=p.run, args=(stop,), daemon=True) for p in probes.values()]
    cpu0 = {pid: process_cpu_seconds(pid) for each in group.values() for pid in each}
    farm0, runs0, started = farm.cpu_seconds(), infra_runs(url), time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(args.seconds - args.warmup)
    stop.set()
    for thread in threads:
        thread.join(timeout=15)
    elapsed = time.monotonic() - started
    infra_ticks = infra_runs(url) - runs0
    each_cpu = {pid: (process_cpu_seconds(pid) - cpu0[pid]) / elapsed for pid in cpu0}
    each_rss = {pid: process_rss_bytes(pid) for pid in cpu0}
    cpu = {name: sum(each_cpu[pid] for pid in members) for name, members in group.items()}
    rss = {name: sum(each_rss[pid] for pid in members) for name, members in group.items()}
    reads = operator_reads(url, args.reads)
    status = httpx.get(f"{url}/api/v1/status", timeout=30).json()
    metrics = fresh_metrics(url)
    rows = status["layers"]["service"]["targets"]
    durations = [r["scrape_duration_seconds"] for r in rows if r["scrape_duration_seconds"] is not None]
    result = {
        "targets": args.targets,
        "models": args.models,
        "interval": args.interval,
        "page_bytes": farm.page_bytes,
        "elapsed": elapsed,
        "up": {"infermon": monitor_up(metrics)},
        "cpu": cpu,
        "rss": rss,
        "infermon_processes": [(each_cpu[pid], each_rss[pid]) for pid in group["infermon"]],  # the monitor first
        "farm_cpu": (farm.cpu_seconds() - farm0) / elapsed,
        "scrape_ms": {"infermon": statistics.median(durations) * 1000 if durations else None},
        "series": {"infermon": sum(1 for line in metrics.splitlines()
                                   if line.startswith("inference_requests_per_second{"))},
        "rule_eval_s": None,
        "schedule": status["layers"]["service"].get("schedule"),
        "infra_ticks": (infra_ticks, int(elapsed // 5)),
        "latency": {f"{side} {path}": probe.summary() for (side, path), probe in probes.items()},
        "reads": reads,
    }
    if prom is not None:
        result["up"]["prometheus"] = int(prom_value(prom, 'count(up{job="engines"} == 1)') or 0)
        result["scrape_ms"]["prometheus"] = 1000 * (prom_value(
            prom, 'quantile(0.5, scrape_duration_seconds{job="engines"})') or 0)
        result["series"]["prometheus"] = int(prom_value(prom, "count(inference_requests_per_second)") or 0)
        result["rule_eval_s"] = sum(g["evaluationTime"] for g in httpx.get(
            f"{prom.url}/api/v1/rules", timeout=30).json()["data"]["groups"])
    return result


READS = ("/api/v1/status", "/", "/api/v1/alerts")  # what an operator opens: `infermon status`, the page


def operator_reads(url: str, times: int) -> dict[str, dict[str, float]]:
    """Each of READS `times` times, one after another, with /healthz probed every 20 ms all along:
    how long each read takes, its size, and the slowest /healthz while they ran (the loop's stall)."""
    found: dict[str, dict[str, float]] = {}
    if times <= 0:
        return found
    with httpx.Client(timeout=60, trust_env=False) as client:
        for path in READS:
            probe, stop = Probe(f"{url}/healthz", 0.02), threading.Event()
            thread = threading.Thread(target=probe.run, args=(stop,), daemon=True)
            thread.start()
            deadline = time.monotonic() + 10
            while not probe.seconds and time.monotonic() < deadline:  # the probe runs before the reads do
                time.sleep(0.01)
            took, size = [], 0
            for _ in range(times):
                started = time.perf_counter()
                answer = client.get(f"{url}{path}")
                took.append(time.perf_counter() - started)
                size = len(answer.content)
            stop.set()
            thread.join(timeout=15)
            found[path] = {"seconds": statistics.median(took), "bytes": size,
                           "healthz_max": max(probe.seconds, default=float("nan"))}
    return found


def report(result: dict[str, Any]) -> str:
    mib = 1024 * 1024
    theirs = "prometheus" in result["cpu"]

    def row(name: str, ours: str, prometheus: str) -> str:
        return f"{name:<28} {ours:>22} {prometheus if theirs else '-':>22}"

    cpu, rss, scrape = result["cpu"], result["rss"], result["scrape_ms"]
    lines = [
        f"{result['targets']} targets at {result['interval']} s ({result['models']} model(s) a page, "
        f"{result['page_bytes'] / 1024:.0f} KB), "
        f"measured over {result['elapsed']:.0f} s after the warm-up"
        + ("" if theirs else ", the monitor alone (--alone)"),
        row("", "infermon serve", "prometheus + rules"),
        row("targets up", str(result["up"]["infermon"]), str(result["up"].get("prometheus"))),
        row("CPU (share of one core)", f"{cpu['infermon']:.0%}", f"{cpu.get('prometheus', 0):.0%}"),
        row("RSS MiB", f"{rss['infermon'] / mib:.0f}", f"{rss.get('prometheus', 0) / mib:.0f}"),
        row("median scrape ms", f"{scrape['infermon'] or 0:.1f}", f"{scrape.get('prometheus', 0):.1f}"),
        row("requests/s series", str(result["series"]["infermon"]), str(result["series"].get("prometheus"))),
    ]
    if len(result["infermon_processes"]) > 1:
        lines.append("  of which the monitor's process and each parse worker: " + ", ".join(
            f"{share:.0%} {size / mib:.0f} MiB" for share, size in result["infermon_processes"]))
    for path in ("/healthz", "/metrics"):
        lines.append(row(f"{path} p50 / p99", result["latency"][f"infermon {path}"],
                         result["latency"].get(f"prometheus {path}", "")))
    if theirs:
        cpu_ratio = cpu["infermon"] / max(cpu["prometheus"], 1e-9)
        rss_ratio = rss["infermon"] / max(rss["prometheus"], 1)
        lines += [
            f"ratios: CPU {cpu_ratio:.2f}x (goal <= 0.5), RSS {rss_ratio:.2f}x (goal <= 0.33)",
            f"page farm CPU {result['farm_cpu']:.0%} of one core; Prometheus rule evaluation "
            f"{(result['rule_eval_s'] or 0) * 1000:.0f} ms per round",
        ]
    else:
        lines.append(f"page farm CPU {result['farm_cpu']:.0%} of one core")
    for path, read in result["reads"].items():
        lines.append(f"read {path}: {read['seconds'] * 1000:.0f} ms, {read['bytes'] / 1e6:.1f} MB; "
                     f"slowest /healthz meanwhile {read['healthz_max'] * 1000:.0f} ms")
    lines += [
        f"infra layer (8 replayed GPUs, every 5 s): {result['infra_ticks'][0]} runs in the window, "
        f"{result['infra_ticks'][1]} ticks due",
        f"schedule: {result['schedule']}",
    ]
    return "\n".join(lines)


def scale_arguments(description: str, models: int = 1, seconds: float = 240, warmup: float = 90,
                    parse_workers: int = 0, reads: int = 3) -> argparse.ArgumentParser:
    """The run's arguments (`bench.scale`'s, and `bench.scale_apart`'s with its own defaults)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--models", type=int, default=models, help="models a page serves (1: the V1 fixture)")
    parser.add_argument("--interval", type=int, default=15)
    parser.add_argument("--seconds", type=float, default=seconds, help="total run, warm-up included")
    parser.add_argument("--warmup", type=float, default=warmup, help="5m windows need not be full; 1m ones do")
    parser.add_argument("--processes", type=int, default=2, help="page farm processes")
    parser.add_argument("--parse-workers", type=int, default=parse_workers,
                        help="the monitor's service.parse_workers (0: its own worker thread)")
    parser.add_argument("--reads", type=int, default=reads,
                        help="after the window: GET /api/v1/status, / and /api/v1/alerts this many times "
                             "each, /healthz probed meanwhile (0: none)")
    parser.add_argument("--json", type=Path, help="also write what was measured to this file")
    return parser


def main() -> None:
    parser = scale_arguments(__doc__.split("\n", 1)[0])
    parser.add_argument("--alone", action="store_true",
                        help="no Prometheus beside it: where one monitor stops keeping up on this machine "
                             "(side by side on 2 cores, each takes the other's CPU)")
    args = parser.parse_args()
    if args.seconds <= args.warmup:
        parser.error("--seconds must exceed --warmup")
    result = run(args)
    if args.json:
        args.json.write_text(json.dumps(result))
    print(report(result), flush=True)


if __name__ == "__main__":
    main()
