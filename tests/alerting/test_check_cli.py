"""`infermon check` loads the alert rules as `serve` would and reports what it cannot evaluate."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.test_cli import env, infermon


def check(tmp_path: Path, rules: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "mine.yml").write_text(rules)
    config = tmp_path / "config.yaml"
    files = f"[alerts/infra.yml, {tmp_path / 'mine.yml'}]"
    config.write_text(f"infra: {{nvml: {{enabled: false}}}}\nalerting:\n  rules_files: {files}\n")
    return subprocess.run(infermon("check", "--config", str(config)), env=env(tmp_path), capture_output=True,
                          text=True, timeout=60, check=False)


def test_check_reports_rules_left_to_prometheus(tmp_path: Path) -> None:
    result = check(tmp_path, "groups:\n- name: mine\n  rules:\n  - alert: Energy\n"
                             "    expr: rate(inference_gpu_energy_joules_total[5m]) > 500\n")
    assert result.returncode == 0, result.stdout + result.stderr
    shipped = sum(len(group["rules"]) for group in yaml.safe_load(Path("alerts/infra.yml").read_text())["groups"])
    assert f"alert rules OK: {shipped} rule(s) from 2 file(s)" in result.stdout  # infra.yml's; Energy is left
    assert "left to Prometheus: Energy" in result.stdout and "rate()" in result.stdout


def test_check_fails_on_a_broken_rule_file(tmp_path: Path) -> None:
    result = check(tmp_path, "groups: [")
    assert result.returncode == 2
    assert "mine.yml: not valid YAML" in result.stderr


def test_serve_refuses_a_broken_rule_file(tmp_path: Path) -> None:
    (tmp_path / "mine.yml").write_text("groups:\n- name: g\n  rules:\n  - alert: X\n    expr: up == 0\n    for: soon\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"alerting:\n  rules_files: [{tmp_path / 'mine.yml'}]\n")
    result = subprocess.run(infermon("serve", "--config", str(config), "--port", "0"), env=env(tmp_path),
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "alerting.rules_files" in result.stderr and "rule 'X': not a Prometheus duration" in result.stderr
