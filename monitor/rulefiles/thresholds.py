"""The numbers the alert rules compare metrics with, read from the rule files themselves.

Each rule of `alerts/*.yml` is parsed by the embedded evaluator's own parser; every comparison
of a selector with a number (`inference_gpu_temperature_celsius > 80`) is a threshold of that
metric. Whatever shows a value next to an alert (a dashboard's colours, the quality report's
flags) reads its thresholds here, so it marks a value exactly where a rule fires.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from monitor.rulefiles.promql import COMPARISONS, Compare, Node, Selector, SetOp
from monitor.rulefiles.rules import SHIPPED_DIR, load_rules

ALERTS_DIR = SHIPPED_DIR


@dataclass(frozen=True)
class RuleThreshold:
    alert: str
    metric: str
    op: str
    value: float
    severity: str

    def fires(self, sample: float) -> bool:
        return COMPARISONS[self.op](sample, self.value)


def _comparisons(node: Node) -> Iterable[Compare]:
    """The instant rules' comparisons (a trend rule compares ratios over days: no threshold of a metric)."""
    if isinstance(node, Compare):
        yield node
    elif isinstance(node, SetOp):
        yield from _comparisons(node.left)
        yield from _comparisons(node.right)


def rule_thresholds(alerts_dir: Path = ALERTS_DIR) -> list[RuleThreshold]:
    """Every (metric, op, number) the rules in `alerts_dir` compare, with the rule's severity."""
    found: list[RuleThreshold] = []
    for rule in load_rules(sorted(alerts_dir.glob("*.yml"))).rules:
        severity = rule.labels["severity"].text if "severity" in rule.labels else ""
        if rule.trend:
            continue
        for compare in _comparisons(rule.expr.root):
            if isinstance(compare.operand, Selector):
                found.append(RuleThreshold(rule.name, compare.operand.name, compare.op, compare.threshold, severity))
    return found
