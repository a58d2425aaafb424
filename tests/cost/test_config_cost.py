"""A bad cost (or target-mapping) setting fails at start, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import ConfigError, load_settings


def test_the_issue_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("""
cost:
  currency: USD
  daily_budget_usd: 500
  gpu_prices: {"H100": {usd_per_hour: 2.5}, "Ascend 910C": {cny_per_hour: 10}}
  cny_per_usd: 7.1
  static_gpus: [{model: "NVIDIA H200", count: 8, node: rack-3}]
service:
  targets: [{name: vllm-a, url: "http://10.0.0.5:8000/metrics", node: gpu-node-01, gpus: [0, 1, 2, 3]}]
""")
    settings = load_settings(path)
    assert settings.cost.daily_budget_usd == 500
    assert settings.cost.static_gpus[0].count == 8
    assert settings.service.targets[0].gpus == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("cost:\n  gpu_prices: {H100: {usd_per_hour: 2.5, cny_per_hour: 17}}\n", "cost.gpu_prices.H100"),
        ("cost:\n  gpu_prices: {H100: {}}\n", "cost.gpu_prices.H100"),
        ("cost:\n  gpu_prices: {H100: {usd_per_hour: -1}}\n", "cost.gpu_prices.H100.usd_per_hour"),
        ("cost:\n  gpu_prices: {H100: {eur_per_hour: 2}}\n", "cost.gpu_prices.H100.eur_per_hour"),
        ("cost:\n  gpu_prices: {'Ascend 910C': {cny_per_hour: 10}}\n", "cost"),
        ("cost:\n  timezone: Mars/Olympus\n", "cost.timezone"),
        ("cost:\n  daily_budget_usd: 0\n", "cost.daily_budget_usd"),
        ("cost:\n  static_gpus: [{model: NVIDIA H200, count: 0, node: r}]\n", "cost.static_gpus.0.count"),
        ("cost:\n  static_gpus: [{count: 8, node: r}]\n", "cost.static_gpus.0.model"),
        ("cost:\n  expensive_factor: 0.5\n", "cost.expensive_factor"),
        ("cost:\n  budget: 5\n", "cost.budget"),
        ("service:\n  targets: [{name: a, url: 'http://x/metrics', gpus: []}]\n", "service.targets.0.gpus"),
        ("service:\n  targets: [{name: a, url: 'http://x/metrics', gpus: [0, 0]}]\n", "service.targets.0.gpus"),
        ("service:\n  targets: [{name: a, url: 'http://x/metrics', gpus: [one]}]\n", "service.targets.0.gpus.0"),
    ],
)
def test_bad_cost_config_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert f"{path}: {key}:" in str(info.value)


def test_cny_without_a_rate_says_which_price(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cost: cny_per_usd is needed: gpu_prices.Ascend 910C"):
        load_settings(None, {"cost": {"gpu_prices": {"Ascend 910C": {"cny_per_hour": 10}}}})


def test_dcgm_targets_take_no_gpu_mapping() -> None:
    with pytest.raises(ConfigError, match=r"infra.dcgm.targets.0.gpus: unknown key"):
        load_settings(None, {"infra": {"dcgm": {"targets": [{"name": "d", "url": "http://d/metrics", "gpus": [0]}]}}})
