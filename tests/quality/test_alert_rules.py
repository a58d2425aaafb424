"""alerts/quality.yml: promtool accepts it, its unit tests pass, and it stays inside the subset."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from monitor.catalog import CATALOG
from tests.conftest import require_binary

ROOT = Path(__file__).parents[2]
RULES = ROOT / "alerts" / "quality.yml"
UNIT_TESTS = ROOT / "alerts" / "tests" / "quality_test.yml"
# selector (optionally with matchers) compared with a number, joined with and/or/unless (+ on/ignoring)
_SELECTOR = r"\(?\s*inference_[a-z0-9_]+(?:\{[^}]*\})?\s*(?:[<>]=?|==|!=)\s*-?[0-9.]+\s*\)?"
_JOIN = r"\s+(?:and|or|unless)(?:\s+(?:on|ignoring)\s*\([a-z_, ]*\))?\s+"
SUBSET = re.compile(rf"^{_SELECTOR}(?:{_JOIN}{_SELECTOR})*$")


def rules() -> list[dict[str, object]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    result = subprocess.run([require_binary("promtool"), "check", "rules", str(RULES)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass() -> None:
    result = subprocess.run([require_binary("promtool"), "test", "rules", str(UNIT_TESTS)],
                            capture_output=True, text=True, check=False, cwd=UNIT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_has_a_firing_and_a_quiet_case() -> None:
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    cases = [case for group in tests for case in group["alert_rule_test"]]
    for rule in rules():
        mine = [c for c in cases if c["alertname"] == rule["alert"]]
        assert any(c["exp_alerts"] for c in mine), f"{rule['alert']} never fires in the tests"
        assert any(not c["exp_alerts"] for c in mine), f"{rule['alert']} has no quiet case"
    # the firing group holds models under each threshold too: those must not be among the alerts
    fired = {(c["alertname"], a["exp_labels"]["model"]) for c in cases for a in c["exp_alerts"]}
    assert ("QualityScoreLow", "good") not in fired and ("QualityRefusalRateDoubled", "doubled_low") not in fired


def test_rules_stay_inside_the_evaluator_subset_and_name_catalogued_metrics() -> None:
    for rule in rules():
        expr = str(rule["expr"])
        assert SUBSET.match(expr), f"{rule['alert']}: outside the subset: {expr}"
        for name in re.findall(r"inference_[a-z0-9_]+", expr):
            assert name in CATALOG and CATALOG[name].layer == "quality", name
        labels = rule["labels"]
        assert isinstance(labels, dict) and labels["layer"] == "quality"
        assert labels["severity"] in ("warning", "critical")
        annotations = rule["annotations"]
        assert isinstance(annotations, dict) and set(annotations) == {"summary", "description", "runbook"}
        assert "{{ $value }}" in annotations["description"] and "{{ $labels.model }}" in annotations["description"]
        anchor = str(annotations["runbook"]).split("#")[1]
        assert f'<a id="{anchor}"></a>' in (ROOT / "docs" / "runbooks" / "quality.md").read_text()
