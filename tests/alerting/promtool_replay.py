"""Replays a `promtool test rules` file through the embedded evaluator.

promtool proves what Prometheus fires on the file's input series; running the same series
through our evaluator and asserting the same `exp_alerts` proves we fire the same alerts with
the same labels and annotations (templates rendered alike), at the same evaluation times.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from monitor.alerting.evaluator import RuleState
from monitor.rulefiles.promql import HistoryAt, Sample, Track, parse
from monitor.rulefiles.rules import load_rules, parse_duration

LOOKBACK_SECONDS = 300.0  # Prometheus' default query.lookback-delta
_EXPANDING = re.compile(r"^(-?[0-9.eE+]+?)([+-])([0-9.eE]+)x(\d+)$")
_REPEATING = re.compile(r"^([-+]?[0-9.eE]+)x(\d+)$")  # `ax n`: a, n + 1 times (a+0xn)


@dataclass(frozen=True)
class Case:
    """One alert_rule_test entry: at `eval_time`, `alertname` has exactly `expected` firing."""

    eval_time: float
    alertname: str
    expected: list[dict[str, dict[str, str]]]


def expand(values: str) -> list[float | None]:
    """promtool's expanding notation: `1 2 _ 3`, `0+10x5` (6 values), `5-1x3`, `0.2x7`, `_x4`."""
    out: list[float | None] = []
    for token in values.split():
        if token.startswith("_"):
            out.extend([None] * (int(token[2:]) if token.startswith("_x") else 1))
            continue
        repeated = _REPEATING.match(token)
        if repeated is not None:
            out.extend([float(repeated.group(1))] * (int(repeated.group(2)) + 1))
            continue
        match = _EXPANDING.match(token)
        if match is None:
            out.append(float(token))
            continue
        start, sign, step, count = match.groups()
        delta = float(step) * (1 if sign == "+" else -1)
        out.extend(float(start) + delta * i for i in range(int(count) + 1))
    return out


def _series_labels(text: str) -> dict[str, str]:
    node = parse(text).selector
    assert node is not None
    return {"__name__": node.name, **{m.label: m.value for m in node.matchers}}


class InputHistory:
    """The input series as a history: every point of each series, for the trend rules' ranges."""

    def __init__(self, series: list[tuple[dict[str, str], list[float | None]]], interval: float) -> None:
        self.by_name: dict[str, list[Track]] = {}
        for labels, values in series:
            kept = [(i * interval, v) for i, v in enumerate(values) if v is not None]
            times, points = np.array([t for t, _ in kept], dtype=float), np.array([v for _, v in kept], dtype=float)
            self.by_name.setdefault(labels["__name__"], []).append(Track(labels, times, points))

    def tracks(self, name: str) -> list[Track]:
        return self.by_name.get(name, [])


class Replay:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.document: dict[str, Any] = yaml.safe_load(path.read_text())
        self.files = [path.parent / f for f in self.document["rule_files"]]
        self.evaluation_interval = parse_duration(self.document.get("evaluation_interval", "1m"))

    def tests(self) -> Iterator[tuple[list[tuple[dict[str, str], list[float | None]]], float, list[Case]]]:
        for test in self.document["tests"]:
            interval = parse_duration(test.get("interval", "1m"))
            series = [(_series_labels(s["series"]), expand(s["values"])) for s in test.get("input_series", [])]
            cases = [Case(parse_duration(c["eval_time"]), c["alertname"], c.get("exp_alerts") or [])
                     for c in test.get("alert_rule_test", [])]
            yield series, interval, cases

    def run(self) -> list[str]:
        """Mismatches between our firing alerts and the file's expectations (empty: we agree)."""
        problems: list[str] = []
        for series, interval, cases in self.tests():
            states = [RuleState(rule) for rule in load_rules(self.files).rules]
            history = InputHistory(series, interval)  # what a trend rule reads (alerts/trend.yml)
            end = max(case.eval_time for case in cases)
            steps = round(end / self.evaluation_interval)
            firing_at: dict[float, dict[str, list[dict[str, dict[str, str]]]]] = {}
            for step in range(steps + 1):
                ts = step * self.evaluation_interval
                samples = self._samples(series, interval, ts)
                over_history = HistoryAt(history, ts)  # one for every trend rule, as the embedded evaluator's
                snapshot: dict[str, list[dict[str, dict[str, str]]]] = {}
                for state in states:
                    state.evaluate(over_history if state.rule.trend else samples, ts)
                    for alert in state.active.values():
                        if alert.state == "firing":
                            labels = {k: v for k, v in alert.labels.items() if k != "alertname"}
                            snapshot.setdefault(state.rule.name, []).append(
                                {"exp_labels": labels, "exp_annotations": alert.annotations})
                firing_at[ts] = snapshot
            for case in cases:
                ours = firing_at[case.eval_time].get(case.alertname, [])
                expected = [{"exp_labels": {k: str(v) for k, v in e.get("exp_labels", {}).items()},
                             "exp_annotations": e.get("exp_annotations", {})} for e in case.expected]
                if _sorted(ours) != _sorted(expected):
                    problems.append(f"{self.path.name} {case.alertname} at {case.eval_time}s: ours {ours} "
                                    f"expected {expected}")
        return problems

    @staticmethod
    def _samples(series: list[tuple[dict[str, str], list[float | None]]], interval: float,
                 ts: float) -> dict[str, list[Sample]]:
        out: dict[str, list[Sample]] = {}
        for labels, values in series:
            latest = None
            for index, value in enumerate(values):
                at = index * interval
                if at > ts:
                    break
                if value is not None and ts - at <= LOOKBACK_SECONDS:
                    latest = value
            if latest is not None:
                out.setdefault(labels["__name__"], []).append((labels, latest))
        return out


def _sorted(alerts: list[dict[str, dict[str, str]]]) -> list[str]:
    return sorted(repr(sorted((k, sorted(v.items())) for k, v in a.items())) for a in alerts)
