"""Prometheus rule files, loaded for the embedded evaluator.

The same files load into Prometheus unchanged. A rule whose expression or templates the embedded
evaluator does not evaluate (`promql.py`, `templates.py`) is an error in a shipped file (`alerts/`,
ours to keep inside what it evaluates) and, in a user's file, "left to Prometheus": reported,
logged and skipped.
A file that is not a rule file at all fails loading either way, naming the file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from monitor.catalog import CATALOG
from monitor.rulefiles.promql import Expr, OutsideSubset, parse
from monitor.rulefiles.templates import Template, TemplateError

log = logging.getLogger("monitor.rulefiles.rules")

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_DIR = PROJECT_ROOT / "alerts"

_DURATION_PART = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
_GROUP_KEYS = {"name", "interval", "limit", "rules"}
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


class RulesError(ValueError):
    """A rule file that cannot be loaded; the message names the file (and the rule)."""


@dataclass(frozen=True)
class AlertRule:
    name: str
    group: str
    key: str  # stable across restarts and file moves: group, name and ordinal of the name
    expr_text: str
    expr: Expr  # one that reads the past (ranges, offsets) is evaluated over the history: see `trend`
    for_seconds: float = 0.0
    keep_firing_for_seconds: float = 0.0
    labels: Mapping[str, Template] = field(default_factory=dict)
    annotations: Mapping[str, Template] = field(default_factory=dict)

    @property
    def metrics(self) -> frozenset[str]:
        return self.expr.metric_names

    @property
    def trend(self) -> bool:
        """Whether the rule reads days of history (evaluated over the history, each new 5-minute point)."""
        return self.expr.reads_history

    @property
    def severity(self) -> str:
        template = self.labels.get("severity")
        return template.text if template is not None else ""


@dataclass(frozen=True)
class LeftToPrometheus:
    file: str
    group: str
    rule: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "group": self.group, "rule": self.rule, "reason": self.reason}


@dataclass
class RuleSet:
    rules: list[AlertRule] = field(default_factory=list)
    left_to_prometheus: list[LeftToPrometheus] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    @property
    def metrics(self) -> set[str]:
        return set().union(*(rule.metrics for rule in self.rules)) if self.rules else set()


def parse_duration(text: Any) -> float:
    """A Prometheus duration (`1h30m`, `90s`, `500ms`); plain numbers are not durations there."""
    if not isinstance(text, str) or not text or _DURATION_PART.sub("", text) != "":
        raise ValueError(f"not a Prometheus duration: {text!r} (e.g. 30s, 5m, 1h30m)")
    return float(sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text)))


def resolve(path: Path) -> Path:
    """A relative path is looked up in the working directory, then in the project (the default files)."""
    if path.is_absolute() or path.exists():
        return path
    candidate = PROJECT_ROOT / path
    return candidate if candidate.exists() else path


def is_shipped(path: Path) -> bool:
    return path.resolve().parent == SHIPPED_DIR


def load_rules(paths: Iterable[Path], shipped: bool | None = None) -> RuleSet:
    """Load rule files; `shipped` None decides per file (inside `alerts/` or not)."""
    ruleset = RuleSet()
    for given in paths:
        path = resolve(Path(given))
        ruleset.files.append(path)
        strict = is_shipped(path) if shipped is None else shipped
        for group_name, rule in _rules_of(path):
            try:
                ruleset.rules.append(_alert_rule(rule, group_name, ruleset))
            except (OutsideSubset, TemplateError) as exc:
                name = str(rule.get("alert") or rule.get("record"))
                if strict:
                    raise RulesError(
                        f"{path}: group {group_name!r}, rule {name!r}: outside the embedded subset: {exc}") from None
                left = LeftToPrometheus(str(path), group_name, name, str(exc))
                ruleset.left_to_prometheus.append(left)
                log.warning("alert rule %s (%s, group %s) is left to Prometheus: %s", name, path, group_name, exc)
            except ValueError as exc:
                name = str(rule.get("alert") or rule.get("record"))
                raise RulesError(f"{path}: group {group_name!r}, rule {name!r}: {exc}") from None
    return ruleset


def _rules_of(path: Path) -> Iterable[tuple[str, Mapping[str, Any]]]:
    try:
        document = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise RulesError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise RulesError(f"{path}: not valid UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise RulesError(f"{path}: not valid YAML: nested too deep") from None
    except yaml.YAMLError as exc:
        raise RulesError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("groups"), list):
        raise RulesError(f"{path}: not a Prometheus rule file (no `groups:` list)")
    for index, group in enumerate(document["groups"]):
        if not isinstance(group, dict) or not group.get("name") or set(group) - _GROUP_KEYS:
            raise RulesError(f"{path}: group {index}: needs a name, and only the keys {sorted(_GROUP_KEYS)}")
        for rule in group.get("rules") or []:
            if not isinstance(rule, dict):
                raise RulesError(f"{path}: group {group['name']!r}: a rule must be a mapping")
            yield str(group["name"]), rule


def _alert_rule(rule: Mapping[str, Any], group: str, ruleset: RuleSet) -> AlertRule:
    unknown = set(rule) - _RULE_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    if "record" in rule:
        raise OutsideSubset("recording rules are evaluated by Prometheus only")
    name = rule.get("alert")
    if not isinstance(name, str) or not name or not isinstance(rule.get("expr"), str | int | float):
        raise ValueError("an alerting rule needs `alert` (a name) and `expr`")
    expr_text = str(rule["expr"]).strip()
    ordinal = sum(1 for r in ruleset.rules if r.group == group and r.name == name)
    return AlertRule(
        name=name,
        group=group,
        key=f"{group}/{name}/{ordinal}",
        expr_text=expr_text,
        expr=_expression(expr_text),
        for_seconds=parse_duration(rule["for"]) if "for" in rule else 0.0,
        keep_firing_for_seconds=parse_duration(rule["keep_firing_for"]) if "keep_firing_for" in rule else 0.0,
        labels=_templates(rule.get("labels"), "labels", check_names=True),
        annotations=_templates(rule.get("annotations"), "annotations", check_names=True),
    )


MIN_TREND_RANGE = 3600.0  # a range over the history's 5-minute points holds at least 12 of them


def _expression(text: str) -> Expr:
    """The rule's expression: an instant one reads one page, cheaply, every tick; a trend one (a
    range or an offset) reads the history, which keeps the monitor's own series at 5-minute points."""
    expr = parse(text)
    if not expr.reads_history:
        return expr
    unknown = sorted(name for name in expr.metric_names if name not in CATALOG)
    if unknown:  # the history keeps the monitor's own series only
        raise OutsideSubset(f"it reads the past of {', '.join(unknown)}, not a series of the monitor's own (the "
                            "history keeps those only)")
    if expr.shortest_range < MIN_TREND_RANGE:
        raise OutsideSubset(f"its shortest range is {expr.shortest_range:g}s, under {MIN_TREND_RANGE:g}s (the "
                            "history keeps a point every 5 minutes)")
    return expr


def _templates(mapping: Any, what: str, check_names: bool) -> dict[str, Template]:
    if mapping is None:
        return {}
    if not isinstance(mapping, dict):
        raise ValueError(f"`{what}` must be a mapping")
    out: dict[str, Template] = {}
    for key, text in mapping.items():
        if check_names and not _LABEL_NAME.match(str(key)):
            raise ValueError(f"{what}: invalid name {key!r}")
        out[str(key)] = Template(str(text))
    return out
