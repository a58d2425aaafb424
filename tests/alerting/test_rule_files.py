"""The shipped rule files: Prometheus accepts them, promtool's unit tests pass and cover every
rule, and the embedded evaluator fires exactly what promtool expects on the same series."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from monitor.config import ConfigError, load_settings
from monitor.rulefiles.rules import SHIPPED_DIR, RulesError, load_rules
from monitor.runtime import Monitor
from tests.alerting.promtool_replay import Replay
from tests.conftest import FIXTURES, require_binary

SHIPPED = sorted(SHIPPED_DIR.glob("*.yml"))
PROMTOOL_TESTS = sorted((SHIPPED_DIR / "tests").glob("*.yml"))
SEMANTICS = FIXTURES / "alerting" / "semantics_test.yml"

# ARCHITECTURE.md "The seed's thresholds" (infra and service) plus the monitor's own rules.
EXPECTED_RULES = {
    "GPUUtilizationLow", "GPUUtilizationSaturated", "GPUTemperatureHigh", "GPUMemoryHigh", "GPUPowerHigh",
    "TTFTP99High", "ErrorRateHigh", "ThroughputDrop", "TTFTObjectiveMissed", "TPOTObjectiveMissed",
    "TargetEngineUnrecognized", "RankImbalance", "LoRAAdaptersWaiting", "SpecDecodeAcceptanceLow",
    "SpecDecodeAcceptanceDrop", "PrefixCacheHitRatioDrop",
    "TargetDown", "MonitorFallingBehind", "GPUDown", "CollectorFailing", "NotificationsFailing", "StoreFailing",
    # cost (alerts/cost.yml) and the canary (alerts/canary.yml)
    "CostBudget80", "CostBudgetExceeded", "CostIdleSpendHigh", "CostPerTokenJump", "CostExpensiveRequests",
    "CostGpuUnpriced", "InferenceCanaryFailing", "InferenceCanaryTTFTHigh", "InferenceCanaryTTFTGapHigh",
}
EXPECTED_RULES |= {  # GPU health (alerts/infra.yml, group infra-health)
    "GPUFellOffBus", "GPUUncorrectableMemoryError", "GPUUncorrectableECCErrors", "GPUContainedMemoryError",
    "GPUNVLinkError", "GPUMemoryRemapRecorded", "GPUMemoryRemapFailedXid", "GPURowRemapPending", "GPURowRemapFailed",
    "GPURetiredPagesPending", "GPURetiredPagesLimit", "GPUPCIeReplayRate", "GPUNVLinkErrorRate",
}
EXPECTED_RULES |= {  # KV-cache tiers, P/D and MoE (alerts/kv.yml, group kv-tiers)
    "KVSwapBackSlow", "KVTierThrashing", "PDTransferFailing", "PDTransferShareHigh", "MoEExpertImbalance",
}
EXPECTED_RULES |= {rule["alert"] for group in yaml.safe_load((SHIPPED_DIR / "quality.yml").read_text())["groups"]
                   for rule in group["rules"]}  # the quality layer's, named in alerts/quality.yml
EXPECTED_RULES |= {rule["alert"] for group in yaml.safe_load((SHIPPED_DIR / "trend.yml").read_text())["groups"]
                   for rule in group["rules"]}  # the trend rules (alerts/trend.yml, evaluated over the history)


def test_shipped_rules_load_inside_the_subset() -> None:
    ruleset = load_rules(SHIPPED, shipped=True)
    assert {rule.name for rule in ruleset.rules} == EXPECTED_RULES
    assert not ruleset.left_to_prometheus
    for rule in ruleset.rules:
        assert rule.severity in ("critical", "warning") and "layer" in rule.labels, rule.name
        assert {"summary", "description", "runbook"} <= set(rule.annotations), rule.name


def test_the_default_settings_load_the_shipped_files() -> None:
    files = [path.resolve() for path in load_rules(load_settings().alerting.rules_files).files]
    assert sorted(files) == SHIPPED  # every shipped file, by default


@pytest.mark.prometheus
def test_promtool_check_rules() -> None:
    result = subprocess.run([require_binary("promtool"), "check", "rules", *map(str, SHIPPED)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.prometheus
@pytest.mark.parametrize("path", [*PROMTOOL_TESTS, SEMANTICS], ids=lambda p: p.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    result = subprocess.run([require_binary("promtool"), "test", "rules", str(path)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", [*PROMTOOL_TESTS, SEMANTICS], ids=lambda p: p.name)
def test_embedded_evaluator_fires_what_promtool_expects(path: Path) -> None:
    assert Replay(path).run() == []


def test_promtool_tests_cover_every_shipped_rule_firing_and_quiet() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in PROMTOOL_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test["alert_rule_test"]:
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert firing == EXPECTED_RULES and quiet == EXPECTED_RULES


def test_a_users_rule_outside_the_subset_is_left_to_prometheus(tmp_path: Path) -> None:
    user = tmp_path / "mine.yml"
    user.write_text(yaml.safe_dump({"groups": [{"name": "mine", "rules": [
        {"alert": "Fine", "expr": "inference_gpu_up == 0"},
        {"alert": "NeedsRate", "expr": "rate(inference_gpu_energy_joules_total[5m]) > 500"},
        {"alert": "NeedsIf", "expr": "inference_gpu_up == 0", "annotations": {"x": "{{ if $value }}y{{ end }}"}},
        {"record": "job:up:sum", "expr": "sum(up)"},
    ]}]}))
    ruleset = load_rules([user])
    assert [rule.name for rule in ruleset.rules] == ["Fine"]
    left = {entry.rule: entry.reason for entry in ruleset.left_to_prometheus}
    assert set(left) == {"NeedsRate", "NeedsIf", "job:up:sum"}
    assert "rate()" in left["NeedsRate"]

    monitor = Monitor(load_settings(None, {"alerting": {"rules_files": [str(user)]}}))
    status = monitor.status()["alerting"]
    assert {entry["rule"] for entry in status["left_to_prometheus"]} == set(left)
    monitor.store.close()


def test_a_shipped_file_outside_the_subset_fails_naming_file_and_rule(tmp_path: Path) -> None:
    bad = tmp_path / "service.yml"
    bad.write_text("groups:\n- name: g\n  rules:\n  - alert: Bad\n    expr: sum(inference_target_up) < 1\n")
    with pytest.raises(RulesError, match=r"service\.yml: group 'g', rule 'Bad': outside the embedded subset"):
        load_rules([bad], shipped=True)


RULE_X = "groups:\n- name: g\n  rules:\n  - alert: X\n    expr: up == 0\n"


@pytest.mark.parametrize(("text", "reason"), [
    ("groups: [", "not valid YAML"),
    ("rules: []", "no `groups:` list"),
    (RULE_X + "    for: ten minutes\n", "rule 'X': not a Prometheus duration"),
    (RULE_X + "    labelz: {}\n", "rule 'X': unknown keys"),
])
def test_a_broken_file_fails_naming_the_file(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "broken.yml"
    path.write_text(text)
    with pytest.raises(RulesError, match=r"broken\.yml") as caught:
        load_rules([path])
    assert reason in str(caught.value)
    with pytest.raises(ConfigError, match=r"alerting\.rules_files"):
        Monitor(load_settings(None, {"alerting": {"rules_files": [str(path)]}}))
