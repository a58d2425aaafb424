"""Two results -> per level and figure: the change, whether it is beyond noise, and if it is worse.

A change counts when it exceeds both the threshold (5 % unless told) and the repeats' noise,
twice the combined standard deviation of the two means:

    noise = 2 * sqrt(stdev_A² + stdev_B²) / |mean_A|

so a result measured once is judged by the threshold alone. A counted change in the wrong
direction (slower, less throughput, dearer) is a regression: `infermon bench compare` exits 1.
Results whose six variables differ are not compared unless forced (`conditions.differences`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from monitor.loadtest.result import figure

# (label, path into a level's summary, +1 when higher is better / -1 when lower is)
FIGURES: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("output tok/s", ("output_tokens_per_s",), +1),
    ("total tok/s", ("total_tokens_per_s",), +1),
    ("requests/s", ("requests_per_s",), +1),
    ("TTFT P50", ("ttft_s", "p50"), -1),
    ("TTFT P95", ("ttft_s", "p95"), -1),
    ("TTFT P99", ("ttft_s", "p99"), -1),
    ("TPOT P50", ("tpot_s", "p50"), -1),
    ("TPOT P99", ("tpot_s", "p99"), -1),
    ("E2E P50", ("e2e_s", "p50"), -1),
    ("E2E P99", ("e2e_s", "p99"), -1),
    ("goodput", ("goodput_ratio",), +1),
    ("J/token", ("gpu", "joules_per_output_token"), -1),
    ("$/1M out tok", ("cost", "usd_per_million_output_tokens"), -1),
)


@dataclass(frozen=True)
class Change:
    level: str
    figure: str
    a: float
    b: float
    relative: float  # (b - a) / a
    noise: float  # relative, from the repeats
    beyond: bool  # beyond both the threshold and the noise
    worse: bool

    @property
    def regression(self) -> bool:
        return self.beyond and self.worse


def compare(a: dict[str, Any], b: dict[str, Any], threshold: float = 0.05) -> list[Change]:
    """Every figure of every level both results measured (matched by the level's label)."""
    levels_b = {lv["level"]["label"]: lv for lv in b["levels"]}
    changes = []
    for level_a in a["levels"]:
        label = level_a["level"]["label"]
        level_b = levels_b.get(label)
        if level_b is None:
            continue
        for name, path, better in FIGURES:
            change = _change(label, name, figure(level_a, *path), figure(level_b, *path), better, threshold)
            if change is not None:
                changes.append(change)
    return changes


def _change(level: str, name: str, a: dict[str, Any] | None, b: dict[str, Any] | None, better: int,
            threshold: float) -> Change | None:
    if a is None or b is None or a["mean"] is None or b["mean"] is None or a["mean"] == 0:
        return None
    mean_a, mean_b = float(a["mean"]), float(b["mean"])
    relative = (mean_b - mean_a) / abs(mean_a)
    noise = 2 * math.hypot(a.get("stdev") or 0.0, b.get("stdev") or 0.0) / abs(mean_a)
    beyond = abs(relative) > max(threshold, noise)
    return Change(level, name, mean_a, mean_b, relative, noise, beyond, relative * better < 0)


def parse_threshold(text: str) -> float:
    """"5%" or "0.05" -> 0.05."""
    value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    if not 0 <= value < 10:
        raise ValueError(f"--threshold {text!r}: a share such as 5% or 0.05")
    return value


def pick_level(result: dict[str, Any], label: str | None) -> dict[str, Any] | None:
    """The level asked for, else the one with the most output tokens per second."""
    levels = result["levels"]
    if label is not None:
        chosen: dict[str, Any] | None = next((lv for lv in levels if lv["level"]["label"] == label), None)
        return chosen
    best: dict[str, Any] = max(levels, key=lambda lv: (figure(lv, "output_tokens_per_s") or {}).get("mean") or 0.0)
    return best


def table_rows(results: Sequence[tuple[str, dict[str, Any]]], label: str | None) -> list[dict[str, Any]]:
    """One row a result (the seed's GPU comparison): what ran, and its figures at one level."""
    rows = []
    for name, result in results:
        conditions = result["conditions"]
        gpu, server, user = conditions.get("gpu", {}), conditions.get("server", {}), conditions.get("user", {})
        level = pick_level(result, label)
        row: dict[str, Any] = {
            "result": name,
            "gpu": f"{gpu.get('count') or '?'}x {gpu.get('model') or 'not observed'}",
            "engine": " ".join(str(v) for v in (server.get("engine"), server.get("version")) if v) or "not observed",
            "precision": user.get("precision") or "",
            "level": level["level"]["label"] if level else "-",
            # a --capacity result's answer: users at the objectives
            "capacity": (result.get("capacity") or {}).get("concurrency"),
        }
        for fig_name, path, _ in FIGURES:
            value = figure(level, *path) if level else None
            row[fig_name] = value["mean"] if value else None
        rows.append(row)
    return rows
