"""A latency step that began with a change of the target's engine (its version, generation or the
engine itself: `inference_target_info`'s labels) is named as that change, from the history, also
after a restart (the store keeps both info series)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from monitor.alerting.explain import explain
from monitor.config import CauseSettings
from monitor.history.changes import engine_changes
from monitor.history.keeper import HistoryKeeper, first_day, wanted_of
from monitor.history.store import HistoryTables, StoredDay
from monitor.store.session import Store
from tests.alerting.contextviews import MODEL, gpu, target, views
from tests.history.worlds import DAY, WEEK, World, seasonal, stepped, stored_days

END = 1_780_000_000.0
CHANGE = END - 3 * DAY + 1234.0  # off the 5-minute grid
TARGET = "vllm-a"
LABELS = {"alertname": "TTFTP99Step", "layer": "service", "kind": "trend", "target": TARGET, "model": MODEL,
          "quantile": "0.99", "window": "5m", "severity": "warning"}


def between(start: float, end: float) -> Callable[[float], float]:
    return lambda t: 1.0 if start <= t < end else math.nan


def info(version: str) -> tuple[tuple[str, str], ...]:
    return (("engine", "vllm"), ("generation", "v1"), ("target", TARGET), ("version", version))


def days(step_at: float, versions: dict[str, tuple[float, float]]) -> list[StoredDay]:
    ttft = (("model", MODEL), ("quantile", "0.99"), ("target", TARGET), ("window", "5m"))
    load = (("model", MODEL), ("target", TARGET), ("window", "5m"))
    worlds = [World("inference_ttft_seconds", {ttft: stepped(seasonal(0.3), step_at, 1.3)}),
              World("inference_requests_per_second", {load: seasonal(10.0)}),  # at the same load
              World("inference_target_info", {info(v): between(*span) for v, span in versions.items()}, noise=0)]
    return stored_days(worlds, END - 3 * WEEK, END)


UPGRADE = {"0.32.0": (0.0, CHANGE), "0.33.0": (CHANGE, math.inf)}


def keeper(stored: list[StoredDay]) -> HistoryKeeper:
    history = HistoryKeeper(wanted_of(None, []), memory_days=15)
    history.load(stored, END)
    return history


def cause(history: HistoryKeeper) -> str:
    return explain(LABELS, replace(views([target(TARGET)], [gpu("0")]), history=history, at=END),
                   CauseSettings())["probable_cause"]


def test_a_step_with_the_version_change_is_the_change(tmp_path: Path) -> None:
    history = keeper(days(CHANGE + 600, UPGRADE))
    changes = engine_changes(history, TARGET, END - WEEK, END)
    assert [(c.before, c.after) for c in changes] == [("vllm v1 0.32.0", "vllm v1 0.33.0")]
    assert CHANGE < changes[0].at <= CHANGE + 300  # its first 5-minute point
    text = cause(history)
    found = re.match(r"trend_engine_change: the latency stepped up \+(\d+) % within (\d+) minutes of the engine "
                     r"change vllm v1 0.32.0 → vllm v1 0.33.0 at ", text)
    assert found is not None, text
    assert 26 <= int(found.group(1)) <= 34 and int(found.group(2)) <= 15  # +30 %, ±2 % noise; 10 minutes on
    context = explain(LABELS, replace(views([target(TARGET)], [gpu("0")]), history=history, at=END),
                      CauseSettings())["context"]
    assert "engine change: vllm v1 0.32.0 → vllm v1 0.33.0 at " in context
    # a restarted monitor reads both info series back from its store and says the same
    store = Store(f"sqlite:///{tmp_path / 'infermon.db'}")
    tables = HistoryTables(store.engine)
    tables.write(days(CHANGE + 600, UPGRADE))
    restarted = HistoryKeeper(wanted_of(None, []), memory_days=15)
    restarted.load(tables.read(first_day(END, restarted.longest_days), restarted.memory_names), END)
    store.close()
    assert cause(restarted) == text


def test_a_new_engine_generation_is_a_change_too() -> None:
    v0 = (("engine", "vllm"), ("generation", "v0"), ("target", TARGET))
    v1 = (("engine", "vllm"), ("generation", "v1"), ("target", TARGET))
    stored = [d for d in days(CHANGE + 600, {}) if d.name != "inference_target_info"]
    stored += stored_days([World("inference_target_info", {v0: between(0.0, CHANGE), v1: between(CHANGE, math.inf)},
                                 noise=0)], END - 3 * WEEK, END)
    assert "of the engine change vllm v0 → vllm v1 at " in cause(keeper(stored))


def test_a_version_that_only_became_known_is_no_change() -> None:
    unread = (("engine", "vllm"), ("generation", "v1"), ("target", TARGET))
    stored = [d for d in days(CHANGE + 600, {}) if d.name != "inference_target_info"]
    stored += stored_days([World("inference_target_info", {unread: between(0.0, CHANGE),
                                                           info("0.33.0"): between(CHANGE, math.inf)}, noise=0)],
                          END - 3 * WEEK, END)
    history = keeper(stored)
    assert engine_changes(history, TARGET, END - WEEK, END) == []
    assert cause(history).split(":")[0] == "trend_engine"
    # an upgrade across a restart whose version read failed for a while is still the upgrade
    stored = [d for d in days(CHANGE + 600, {}) if d.name != "inference_target_info"]
    stored += stored_days([World("inference_target_info", {info("0.32.0"): between(0.0, CHANGE - 600),
                                                           unread: between(CHANGE - 600, CHANGE),
                                                           info("0.33.0"): between(CHANGE, math.inf)}, noise=0)],
                          END - 3 * WEEK, END)
    changes = engine_changes(keeper(stored), TARGET, END - WEEK, END)
    assert [(c.before, c.after) for c in changes] == [("vllm v1 0.32.0", "vllm v1 0.33.0")]


@pytest.mark.parametrize(("step_at", "versions", "expected"), [
    # the version known all along and unchanged: its configuration or the traffic mix, not a new version
    (CHANGE + 600, {"0.33.0": (0.0, math.inf)}, "trend_config"),
    (CHANGE + 12 * 3600, UPGRADE, "trend_config"),  # the step came half a day after the change
    (CHANGE + 600, {}, "trend_engine"),  # no version known: it could have changed unseen
])
def test_a_step_without_a_change_near_it_is_not_the_change(step_at: float, versions: dict[str, tuple[float, float]],
                                                           expected: str) -> None:
    assert cause(keeper(days(step_at, versions))).split(":")[0] == expected


def test_the_daily_rhythm_alone_is_no_step_at_a_change() -> None:
    history = keeper(days(math.inf, UPGRADE))  # no step at all; the version changed in the afternoon's rise
    assert cause(history).split(":")[0] == "trend_config"
