"""Panel thresholds read from the shipped alert rules, so a dashboard colours exactly where an alert fires.

Each rule of `alerts/*.yml` is parsed by the embedded evaluator's own parser; every comparison
of a selector with a number (`inference_gpu_temperature_celsius > 80`) is a threshold of that
metric. Grafana colours a value by the highest step at or below it, so the colour of each
interval between the numbers is the worst severity of the rules that fire inside it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from monitor.alerting.expr import Compare, Node, Selector, SetOp
from monitor.alerting.rules import load_rules

ALERTS_DIR = Path(__file__).resolve().parents[2] / "alerts"
SEVERITY_COLOUR = {"": "green", "info": "blue", "warning": "orange", "critical": "red"}
_RANK = {"": 0, "info": 1, "warning": 2, "critical": 3}
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}


@dataclass(frozen=True)
class RuleThreshold:
    alert: str
    metric: str
    op: str
    value: float
    severity: str

    def fires(self, sample: float) -> bool:
        return _OPS[self.op](sample, self.value)


def _comparisons(node: Node) -> Iterable[Compare]:
    if isinstance(node, Compare):
        yield node
    elif isinstance(node, SetOp):
        yield from _comparisons(node.left)
        yield from _comparisons(node.right)


def rule_thresholds(alerts_dir: Path = ALERTS_DIR) -> list[RuleThreshold]:
    """Every (metric, op, number) the shipped rules compare, with the rule's severity."""
    found: list[RuleThreshold] = []
    for rule in load_rules(sorted(alerts_dir.glob("*.yml"))).rules:
        severity = rule.labels["severity"].text if "severity" in rule.labels else ""
        for compare in _comparisons(rule.expr):
            if isinstance(compare.operand, Selector):
                found.append(RuleThreshold(rule.name, compare.operand.name, compare.op, compare.threshold, severity))
    return found


def steps_for(metric: str, rules: list[RuleThreshold]) -> list[tuple[float | None, str]]:
    """Grafana threshold steps [(None, base colour), (value, colour), ...] for one metric."""
    mine = [r for r in rules if r.metric == metric and r.op != "=="]
    values = sorted({r.value for r in mine})
    if not values:
        return []
    probes = [values[0] - 1.0, *(v + _gap(values, i) for i, v in enumerate(values))]
    colours = [_colour(p, mine) for p in probes]
    return [(None, colours[0]), *zip(values, colours[1:], strict=True)]


def _gap(values: list[float], index: int) -> float:
    """A point inside the interval that starts at values[index] (strictly above it)."""
    following = values[index + 1] if index + 1 < len(values) else values[index] + 2.0
    return (following - values[index]) / 2


def _colour(sample: float, rules: list[RuleThreshold]) -> str:
    worst = max((r.severity for r in rules if r.fires(sample)), key=lambda s: _RANK.get(s, 2), default="")
    return SEVERITY_COLOUR.get(worst, "orange")
