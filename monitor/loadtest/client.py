"""What the client machine did during a measured window: its load and the bench's own CPU time.

A benchmark's client shares the machine with whatever else runs there; when that changes
between two sessions, latencies move with it and a comparison reads a regression that is not
the server's. So every window records, beside the server's figures:

    load_1m               the machine's 1-minute load average (mean of the window's two ends)
    cpu_count             the machine's CPUs, to read the load against
    machine_busy_ratio    share of all the machine's CPU time that was busy (Linux /proc/stat)
    client_cpu_s          this process's CPU seconds (user + system) over the window
    client_cpu_ms_per_request, client_cpu_ratio   the same per request and per second of window

`verdict.drift` compares two results' windows on these.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC_STAT = Path("/proc/stat")


def parse_proc_stat(text: str) -> tuple[float, float] | None:
    """The first `cpu` line of /proc/stat -> (busy, total) jiffies; idle and iowait are not busy."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [float(v) for v in line.split()[1:]]
            # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
            total = sum(fields[:8])
            idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
            return total - idle, total
    return None


def _read_stat(path: Path) -> tuple[float, float] | None:
    try:
        return parse_proc_stat(path.read_text())
    except OSError:
        return None


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not every platform has it
        return None


@dataclass(frozen=True)
class Mark:
    cpu_s: float  # this process's CPU time
    stat: tuple[float, float] | None  # the machine's busy and total CPU time (jiffies)
    load_1m: float | None


class ClientMeter:
    """`mark()` at a window's start and end; `figures(start, end, requests, wall_s)` between them."""

    def __init__(self, stat: Path = PROC_STAT, cpu: Callable[[], float] = time.process_time,
                 load: Callable[[], float | None] = _load) -> None:
        self.stat, self.cpu, self.load = stat, cpu, load

    def mark(self) -> Mark:
        return Mark(self.cpu(), _read_stat(self.stat), self.load())

    @staticmethod
    def figures(start: Mark, end: Mark, requests: int, wall_s: float) -> dict[str, Any]:
        cpu_s = end.cpu_s - start.cpu_s
        busy = None
        if start.stat and end.stat and end.stat[1] > start.stat[1]:
            busy = (end.stat[0] - start.stat[0]) / (end.stat[1] - start.stat[1])
        loads = [v for v in (start.load_1m, end.load_1m) if v is not None]
        return {
            "load_1m": sum(loads) / len(loads) if loads else None,
            "cpu_count": os.cpu_count(),
            "machine_busy_ratio": busy,
            "client_cpu_s": cpu_s,
            "client_cpu_ms_per_request": cpu_s * 1000 / requests if requests else None,
            "client_cpu_ratio": cpu_s / wall_s if wall_s > 0 else None,
        }
