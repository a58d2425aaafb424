"""alerts/cost.yml: promtool accepts it, its unit tests pass, and they cover every rule both ways."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from monitor.catalog import CATALOG
from tests.conftest import require_binary

ALERTS = Path(__file__).parents[2] / "alerts"
RULES = ALERTS / "cost.yml"
TESTS = ALERTS / "tests" / "cost_test.yml"


def rules() -> list[dict[str, object]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    result = subprocess.run([require_binary("promtool"), "check", "rules", str(RULES)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = subprocess.run([require_binary("promtool"), "test", "rules", str(TESTS)],
                            capture_output=True, text=True, check=False, cwd=TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_is_tested_firing_and_not_firing() -> None:
    cases = [case for test in yaml.safe_load(TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    for rule in rules():
        mine = [case for case in cases if case["alertname"] == rule["alert"]]
        assert any(case["exp_alerts"] for case in mine), f"{rule['alert']} never fires in the tests"
        assert any(not case["exp_alerts"] for case in mine), f"{rule['alert']} is never tested not firing"


def test_rules_stay_in_the_evaluator_subset_on_cost_metrics() -> None:
    for rule in rules():
        expr = str(rule["expr"])
        assert "(" not in expr.replace("on(", "").replace("ignoring(", ""), expr  # no functions
        names = set(re.findall(r"\b(inference_[a-z_]+)", expr))
        assert names and all(CATALOG[name].layer == "cost" for name in names), expr
        assert re.fullmatch(r"[\w{}=\",.\s<>!]+", expr), expr  # selectors, comparisons, and/or/unless
        assert rule["labels"]["layer"] == "cost" and rule["labels"]["severity"] in ("warning", "critical")
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}
