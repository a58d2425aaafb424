"""alerts/canary.yml: valid for Prometheus, unit-tested by promtool (every rule firing and not
firing), and inside the PromQL subset the embedded evaluator understands."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.catalog import CATALOG
from tests.conftest import require_binary

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "canary.yml"
UNIT_TESTS = ROOT / "alerts" / "tests" / "canary_test.yml"

_TOKEN = re.compile(r"""\s*(?:
    (?P<setop>and|or|unless)\b(?:\s*(?:on|ignoring)\s*\([\w\s,]*\))?
  | (?P<paren>[()])
  | (?P<cmp>==|!=|>=|<=|>|<)
  | (?P<number>-?\d+(?:\.\d+)?(?:e-?\d+)?)\b
  | (?P<selector>(?P<metric>inference_\w+)(?:\{(?P<labels>[^}]*)\})?)
)""", re.X)


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def subset_violation(expr: str) -> str | None:
    """None if `expr` is comparisons `selector OP number` joined by and/or/unless, with parentheses."""
    kinds, position = [], 0
    while position < len(expr.rstrip()):
        match = _TOKEN.match(expr, position)
        if match is None:
            return f"outside the subset at {expr[position:]!r}"
        kind = match.lastgroup if match.lastgroup != "metric" else "selector"
        if kind == "selector" and match.group("metric") not in CATALOG:
            return f"{match.group('metric')} is not one of our metrics"
        kinds.append("selector" if match.group("selector") else kind)
        position = match.end()
    comparisons = " ".join(k for k in kinds if k != "paren").split(" setop ")
    bad = [c for c in comparisons if c != "selector cmp number"]
    return f"not a selector compared with a number: {bad}" if bad else None


@pytest.mark.prometheus
def test_promtool_checks_and_unit_tests_pass() -> None:
    promtool = require_binary("promtool")
    for args in (["check", "rules", str(RULES)], ["test", "rules", str(UNIT_TESTS)]):
        done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_rule_is_tested_firing_and_not_firing() -> None:
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    assert {rule["alert"]: cases.get(rule["alert"]) for rule in _rules()} == {
        rule["alert"]: {True, False} for rule in _rules()}


def test_rules_stay_in_the_evaluators_subset_and_carry_what_receivers_need() -> None:
    for rule in _rules():
        assert subset_violation(rule["expr"]) is None, (rule["alert"], subset_violation(rule["expr"]))
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["labels"]["layer"] in {"canary", "service"}
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description", "runbook"}
        assert "{{ $value }}" in annotations["description"] and "{{ $labels.probe }}" in annotations["description"]
        anchor = annotations["runbook"].split("#")[1]
        assert f"## {rule['alert']}" in (ROOT / annotations["runbook"].split("#")[0]).read_text()
        assert anchor == rule["alert"].lower()


@pytest.mark.parametrize(("expr", "ok"), [
    ("inference_canary_up == 0", True),
    ('(inference_canary_up{probe="a"} == 0) and on(probe) inference_canary_consecutive_failures >= 2', True),
    ("inference_canary_ttft_seconds > 1 unless ignoring(target) inference_canary_ttft_gap_seconds > 0.5", True),
    ("rate(inference_canary_probes_total[5m]) > 0", False),
    ("inference_canary_ttft_seconds - inference_canary_tpot_seconds > 1", False),
    ("inference_canary_ttft_seconds", False),
    ("inference_no_such_metric > 1", False),
])
def test_the_subset_check_itself(expr: str, ok: bool) -> None:
    assert (subset_violation(expr) is None) == ok
