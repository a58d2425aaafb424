"""Resident memory of `infermon serve` scraping 50 vLLM targets (goal < 150 MB).

The windows are scaled down from the defaults (15 s interval, 5m window, 1h baseline) to a 3 s
interval, a 1m window and a 12m baseline, so the 1m window fills in about 80 s. The baseline store
keeps the window plus two baselines (25 min at these settings), which an 80 s run never fills:
this is the memory of the first minutes, not the steady state. `python -m bench.target_memory`
measures one target at the steady state of the shipped settings.

    python -m bench.memory_serve [--targets 50] [--seconds 80]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from monitor.ports import free_port
from tests.support.pages import grown, v1_page
from tests.support.pageserver import PageServer, growing


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=80)
    args = parser.parse_args()
    variants = [grown(v1_page(), 1 + 0.01 * i).encode() for i in range(int(args.seconds) + 30)]
    pages = {f"/t{i}/metrics": growing(variants) for i in range(args.targets)}
    with PageServer(keep_alive=True) as server, tempfile.TemporaryDirectory() as tmp:
        for path, page in pages.items():
            server.set(path, page)
        port = free_port()
        config = Path(tmp) / "config.yaml"
        config.write_text(yaml.safe_dump({
            "server": {"host": "127.0.0.1", "port": port, "log_level": "warning"},
            "service": {"scrape_interval": "3s", "windows": ["1m"], "baseline_window": "12m",
                        "targets": [{"name": f"t{i}", "url": server.url(f"/t{i}/metrics")}
                                    for i in range(args.targets)]},
            "storage": {"url": f"sqlite:///{tmp}/infermon.db"},
        }))
        serve = subprocess.Popen([sys.executable, "-m", "monitor.cli", "serve", "--config", str(config)],
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            samples = []
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                time.sleep(5)
                samples.append(rss_mib(serve.pid))
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            lines = metrics.splitlines()
            up = sum(1 for line in lines if line.startswith("inference_target_up{") and line.endswith(" 1.0"))
        finally:
            serve.terminate()
            serve.wait(10)
    print(f"targets={args.targets} up_series={up} rss_start={samples[0]:.1f} MiB "
          f"rss_end={samples[-1]:.1f} MiB rss_max={max(samples):.1f} MiB")


if __name__ == "__main__":
    main()
