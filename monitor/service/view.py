"""What the service layer shows: the fleet's and each target's numbers as /metrics, the alerts,
cost and the overview page read them.

A view is built whole after the scrapes (`ServiceCollector.assemble`) and never changed in
place, so readers in other threads need no lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monitor.service.derive import Objectives, Window, WindowStats, baseline_state
from monitor.service.extract import LoraState

TargetLines = tuple[tuple[object, ...], dict[str, str]]
"""A target's lines of /metrics, family name -> lines, and the key of the view they were rendered for."""


@dataclass
class TargetView:
    name: str
    up: bool
    engine: str | None
    generation: str | None
    stale: bool = False  # up at its last scrape, but that was more than collector.STALE_INTERVALS ago
    note: str = ""  # the engine table's note: upstream state, numbers its page does not give
    waiting: bool = False  # no scrape has finished yet: neither up nor down
    recognized: bool = True  # False: the page answered but matches no engine table
    detail: str | None = None  # why it is down or unrecognised
    refused: bool = False  # down because its page was over one of its budgets (budget.py)
    version: str | None = None  # the engine's version, where its API answers it (version.py)
    gauges: dict[str, dict[str, float]] = field(default_factory=dict)  # metric -> model -> value
    labelled: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # ... -> rank/reason -> value
    lora: LoraState | None = None
    stats: dict[tuple[str, str], WindowStats] = field(default_factory=dict)  # (model, window)
    texts: TargetLines | None = None  # `target.Derived.texts`


@dataclass
class ServiceView:
    ts: float
    windows: list[Window]
    objectives: Objectives
    targets: dict[str, TargetView] = field(default_factory=dict)
    fleet: dict[tuple[str, str], WindowStats] = field(default_factory=dict)  # (model, window)
    baseline_seconds: float = 0.0
    baseline_min_coverage: float = 0.0

    def baseline(self, stats: WindowStats) -> str:
        return baseline_state(stats.baseline_coverage, self.baseline_seconds, self.baseline_min_coverage)


def target_state(up: bool, stale: bool, error: str | None, unrecognized: str | None) -> str:
    """up | unrecognized (answers, no engine's page) | stale | down | waiting (not scraped yet)."""
    if up:
        return "stale" if stale else "unrecognized" if unrecognized is not None else "up"
    return "waiting" if error is None else "down"
