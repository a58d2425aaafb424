"""Panel thresholds read from the shipped alert rules, so a dashboard colours exactly where an alert fires.

Grafana colours a value by the highest step at or below it, so the colour of each interval
between a metric's rule thresholds (`monitor/rulefiles/thresholds.py`) is the worst severity of
the rules that fire inside it.
"""

from __future__ import annotations

from monitor.rulefiles.thresholds import RuleThreshold

SEVERITY_COLOUR = {"": "green", "info": "blue", "warning": "orange", "critical": "red"}
_RANK = {"": 0, "info": 1, "warning": 2, "critical": 3}


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
