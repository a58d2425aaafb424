"""A trend alert's probable cause comes from what changed over the same days: the history's
week-over-week facts of the target's load, its engine's cache and its GPUs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from monitor.alerting.explain import explain
from monitor.config import CauseSettings
from monitor.history.keeper import HistoryKeeper, Wanted, week_over_week
from monitor.rulefiles.promql import Matcher
from tests.alerting.contextviews import MODEL, NODE, gpu, target, views
from tests.history.worlds import DAY, WEEK, World, creeping, seasonal, stored_days

END = 1_780_000_000.0
TARGET = "vllm-a"
LABELS = {"alertname": "TTFTP99Creep", "layer": "service", "kind": "trend", "target": TARGET, "model": MODEL,
          "quantile": "0.99", "window": "5m", "severity": "warning"}


def keeper(load: float = 0.0, kv: float = 0.0, power: float = 0.0, prefix: float = 0.0) -> HistoryKeeper:
    """Two weeks of the cause series of one target on one GPU; each grows by its rate a day over the
    last 3 days (negative: falls)."""
    def series(base: float, per_day: float) -> Callable[[float], float]:
        return creeping(seasonal(base), END - 3 * DAY, per_day)

    target_labels = (("model", MODEL), ("target", TARGET), ("window", "5m"))
    worlds = [
        World("inference_requests_per_second", {target_labels: series(10.0, load)}),
        World("inference_kv_cache_usage_ratio", {(("model", MODEL), ("target", TARGET)): series(0.4, kv)}),
        World("inference_prefix_cache_hit_ratio", {target_labels: series(0.6, prefix)}),
        World("inference_gpu_power_watts", {(("gpu", "0"), ("node", NODE)): series(500.0, power)}),
    ]
    history = HistoryKeeper([Wanted(w.name) for w in worlds], memory_days=9)
    history.load(stored_days(worlds, END - 2 * WEEK, END), END)
    return history


def cause(history: HistoryKeeper) -> dict[str, str]:
    found = views([target(TARGET)], [gpu("0")])
    return explain(LABELS, replace(found, history=history, at=END), CauseSettings())


@pytest.mark.parametrize(("grown", "expected"), [
    ({"power": -0.03}, "trend_hardware"),
    ({"load": 0.06}, "trend_load"),
    ({"kv": 0.06}, "trend_cache"),
    ({"prefix": -0.06}, "trend_prefix_cache"),
    ({}, "trend_unexplained"),  # a creep at the same load: no version change could explain a growth
])
def test_the_cause_names_what_changed_over_the_same_days(grown: dict[str, float], expected: str) -> None:
    annotations = cause(keeper(**grown))
    assert annotations["probable_cause"].split(":")[0] == expected
    assert "vs. the same hours a week ago: requests/s:" in annotations["context"]


def test_a_step_at_the_same_load_is_the_engines_only_where_its_version_is_not_tracked() -> None:
    found = views([target(TARGET)], [gpu("0")])
    step = {**LABELS, "alertname": "TTFTP99Step"}
    text = explain(step, replace(found, history=keeper(), at=END), CauseSettings())["probable_cause"]
    assert text.startswith("trend_engine: the latency stepped up at the same load") and "engine_version" in text
    creep = explain(LABELS, replace(found, history=keeper(), at=END), CauseSettings())["probable_cause"]
    assert "version" not in creep and "keeps growing" in creep


def test_the_numbers_are_the_last_six_hours_against_the_same_hours_a_week_before() -> None:
    history = keeper(load=0.06)
    ratio = week_over_week(history, "inference_requests_per_second", {"target": TARGET}, END)
    assert ratio is not None
    # +6 %/day for 3 days, the last 6 hours centred 2.875 days in, seasonality cancelled (noise ±2 %)
    assert ratio == pytest.approx(1.06 ** 2.875, rel=0.015)
    expected = f"trend_load: the latency grew with the load: {ratio * 100:.4g} %"
    assert cause(history)["probable_cause"].startswith(expected)


def test_without_a_history_the_trend_alert_is_still_explained_by_its_facts() -> None:
    annotations = explain(LABELS, views([target(TARGET)], [gpu("0")]), CauseSettings())
    assert annotations["probable_cause"].startswith("unknown:")


def test_a_series_new_since_last_week_is_new_not_a_ratio() -> None:
    world = World("inference_preemptions_per_second", {(("target", TARGET),): lambda t: 0.0 if t < END - DAY else 2.0})
    history = HistoryKeeper([Wanted(world.name, (Matcher("target", "=", TARGET),))], memory_days=9)
    history.load(stored_days([world], END - 2 * WEEK, END), END)
    assert week_over_week(history, world.name, {"target": TARGET}, END) == float("inf")
