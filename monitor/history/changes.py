"""Engine changes in the history, and whether a latency step began with one.

`inference_target_info{target,engine,generation,version}` is 1 for the engine the target serves
with (the version as its API answers it: monitor/service/version.py); the history keeps it like the
trend causes' series. A new engine, generation or version behind the target is a new label set: its
series begins at the change, the old one ends there, and the store keeps both, so a restart knows
the change too. A step of P99 latency that began within minutes of such a change is the change's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from monitor.history.keeper import HistoryKeeper
from monitor.history.store import STEP
from monitor.rulefiles.promql import Track, points_between

INFO = "inference_target_info"
IDENTITY = ("engine", "generation", "version")  # what names the engine, in that order
# a trend alert's name -> the metric whose step it is
STEPPED = {"TTFTP99": "inference_ttft_seconds", "TPOTP99": "inference_tpot_seconds",
           "E2ELatencyP99": "inference_e2e_latency_seconds"}
HOUR = 3600.0
WEEK = 7 * 86400.0


@dataclass(frozen=True)
class EngineChange:
    at: float  # the first 5-minute point of the new engine
    before: str  # "vllm v0 0.32.0"
    after: str


@dataclass(frozen=True)
class StepAtChange:
    change: EngineChange
    step_at: float  # where the latency's level moved most, near the change
    ratio: float  # the level after the step over the level before

    @property
    def minutes(self) -> float:
        return abs(self.step_at - self.change.at) / 60


def identity(labels: Mapping[str, str]) -> str:
    return " ".join(labels[k] for k in IDENTITY if labels.get(k))


def engine_changes(history: HistoryKeeper, target: str, since: float, until: float) -> list[EngineChange]:
    """The target's engine changes in (since, until], oldest first: each label set of its info
    series, ordered by its first point, against the one before it. A version that only became
    known or unknown (the same engine, its version read or not) is no change."""
    spans = sorted((float(track.ts[0]), identity(track.labels)) for track in history.tracks(INFO)
                   if track.labels.get("target") == target and len(track.ts))
    named = {name for _, name in spans}
    spans = [(at, name) for at, name in spans if not any(other.startswith(name + " ") for other in named)]
    return [EngineChange(at, before, after) for (_, before), (at, after) in pairwise(spans)
            if since < at <= until and before != after]


def version_tracked(history: HistoryKeeper, target: str, since: float) -> bool:
    """Whether the history knew the version of the target's engine all along since `since`
    (`service.engine_version` on, every read answered): only then can it tell that a step came
    without a version change."""
    tracks = [t for t in history.tracks(INFO) if t.labels.get("target") == target and len(t.ts)]
    versioned = [t for t in tracks if t.labels.get("version")]
    unversioned = [t for t in tracks if not t.labels.get("version") and float(t.ts[-1]) > since]
    return bool(versioned) and not unversioned and min(float(t.ts[0]) for t in versioned) <= since


def step_near(track: Track, around: float, reach: float = 2 * HOUR, side: float = HOUR) -> tuple[float, float] | None:
    """Where within `reach` of `around` the level moved most: the mean of the `side` seconds after a
    point over the mean of the `side` seconds before it, divided by the same a week before where the
    track reaches back that far (a daily rhythm moves the level within an hour too): (that time, ratio)."""
    times, values = points_between(track, around - WEEK - reach - side, around + reach + side)
    best: tuple[float, float] | None = None
    for at in np.arange(around - reach, around + reach + 1, STEP):
        ratio = _moved(times, values, float(at), side)
        if ratio is None:
            continue
        week_before = _moved(times, values, float(at) - WEEK, side)
        ratio = ratio / week_before if week_before else ratio
        if best is None or abs(np.log(ratio)) > abs(np.log(best[1])):
            best = (float(at), ratio)
    return best


def _moved(times: np.ndarray, values: np.ndarray, at: float, side: float) -> float | None:
    before = values[(times > at - side) & (times <= at)]
    after = values[(times > at) & (times <= at + side)]
    if len(before) < 3 or len(after) < 3 or float(np.mean(before)) <= 0 or float(np.mean(after)) <= 0:
        return None
    return float(np.mean(after)) / float(np.mean(before))


def step_at_change(history: HistoryKeeper, labels: Mapping[str, str], at: float,
                   since: float) -> StepAtChange | None:
    """For a trend alert (its labels: alertname, target, model, quantile, window): the engine change
    of its target in (since, at] nearest to a step of the alert's latency, and that step."""
    metric = next((m for prefix, m in STEPPED.items() if labels.get("alertname", "").startswith(prefix)), None)
    target = labels.get("target")
    if metric is None or not target:
        return None
    match = {k: labels[k] for k in ("target", "model", "quantile", "window") if labels.get(k)}
    tracks = [t for t in history.tracks(metric) if all(t.labels.get(k) == v for k, v in match.items())]
    found = []
    for change in engine_changes(history, target, since, at):
        for track in tracks:
            step = step_near(track, change.at)
            if step is not None:
                found.append(StepAtChange(change, *step))
    return min(found, key=lambda s: s.minutes, default=None)
