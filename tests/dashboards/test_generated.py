"""The committed dashboards and Kubernetes manifests are what the generator gives, and hold together:
stable uids, a data-source variable, units everywhere, thresholds equal to the alert rules, every
expression valid PromQL (promtool) on metrics the monitor exports.

Grafana itself cannot run here (no Docker daemon, not packaged for Debian): the JSON model is
checked structurally, and the queries against the real Prometheus in test_live.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from monitor.catalog import CATALOG
from monitor.dashboards.generated import generated_files
from monitor.rulefiles.trends import QUANTITIES, Builder
from tests.conftest import require_binary
from tests.dashboards.panels import (
    ROOT,
    dashboards,
    defined_variables,
    panels,
    queries,
    query_variables,
    substitute,
    undefined_variables,
)

UIDS = {"overview.json": "infermon-overview", "infrastructure.json": "infermon-infrastructure",
        "service.json": "infermon-service", "quality.json": "infermon-quality", "cost.json": "infermon-cost"}
# A comparison of one of our metrics with a number, as the rule files write them (read apart from the generator).
RULE_COMPARISON = re.compile(r"(inference_\w+)(?:\{[^}]*\})?\s*(>=|<=|>|<|!=)\s*(-?[0-9.]+)")


def test_committed_files_are_what_the_generator_gives() -> None:
    files = generated_files()
    assert set(files) >= {f"dashboards/{name}" for name in UIDS}
    stale = [path for path, text in files.items() if (ROOT / path).read_text() != text]
    assert not stale, f"regenerate with `python -m monitor.dashboards`: {stale}"


def test_five_dashboards_with_stable_uids_and_a_datasource_variable() -> None:
    boards = dashboards()
    assert {name: board["uid"] for name, board in boards.items()} == UIDS
    for name, board in boards.items():
        variables = {var["name"]: var for var in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        for panel in panels(board):
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, panel["title"])
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids)), name


def test_template_variables_per_dashboard() -> None:
    names = {name: {var["name"] for var in board["templating"]["list"]} for name, board in dashboards().items()}
    assert {"node", "gpu"} <= names["infrastructure.json"]
    assert {"target", "model", "window"} <= names["service.json"]
    assert {"model", "window"} <= names["overview.json"] and {"model", "window"} <= names["cost.json"]
    assert "model" in names["quality.json"]


def test_every_panel_has_a_unit_and_units_follow_the_metric_names() -> None:
    for name, board in dashboards().items():
        for panel in panels(board):
            unit = panel["fieldConfig"]["defaults"].get("unit")
            assert unit, (name, panel["title"])
            exprs = " ".join(t["expr"] for t in panel["targets"])
            if _growth_a_day(exprs):  # the creep rule's growth a day, in percent a day
                assert unit == "percent", (name, panel["title"])
            elif _against_the_past(exprs):  # a ratio of a series to itself weeks before (the trend rules')
                assert unit == "percentunit", (name, panel["title"])
            elif re.search(r"inference_\w+_seconds\{", exprs) and "timestamp" not in exprs:
                assert unit == "s", (name, panel["title"])
            if "_bytes" in exprs:
                assert unit == "bytes", (name, panel["title"])
            if "_usd" in exprs and "ratio" not in exprs:
                assert unit == "currencyUSD", (name, panel["title"])


def _against_the_past(exprs: str) -> bool:
    return " offset " in exprs and " / " in exprs


def _growth_a_day(exprs: str) -> bool:
    return "^ (1 / 7)" in exprs


def test_the_growth_a_day_panel_is_the_creep_rules_value() -> None:
    """The service dashboard plots the TTFT creep rule's own growth a day (rulefiles/trends.py),
    over the dashboard's targets and models."""
    growth = next(p for p in panels(dashboards()["service.json"]) if p["title"] == "P99 TTFT growth a day")
    q = next(q for q in QUANTITIES if q.key == "TTFTP99")
    selector = q.selector.replace('target!=""', 'target=~"$target",target!="",model=~"$model"')
    assert [t["expr"] for t in growth["targets"]] == [Builder(replace(q, selector=selector), "up").per_day_shown()]
    assert growth["fieldConfig"]["defaults"]["unit"] == "percent"


def _rule_numbers() -> dict[str, set[float]]:
    numbers: dict[str, set[float]] = {}
    for path in sorted((ROOT / "alerts").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                for metric, _, value in RULE_COMPARISON.findall(str(rule["expr"])):
                    numbers.setdefault(metric, set()).add(float(value))
    return numbers


def _panel_metric(panel: dict[str, object]) -> str | None:
    """The metric a panel colours: its first query's first inference_* name."""
    found = re.search(r"inference_\w+", str(panel["targets"][0]["expr"]))  # type: ignore[index]
    return found.group(0) if found else None


def test_thresholds_equal_the_alert_rules() -> None:
    numbers = _rule_numbers()
    assert numbers["inference_gpu_temperature_celsius"] == {80.0}  # the reader above reads the files
    checked = set()
    for name, board in dashboards().items():
        for panel in panels(board):
            metric = _panel_metric(panel)
            steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            values = {step["value"] for step in steps if step["value"] is not None}
            if _against_the_past(" ".join(t["expr"] for t in panel["targets"])):
                assert not values, (name, panel["title"])  # a ratio: the metric's numbers do not apply
            elif metric in numbers:
                assert values == numbers[metric], (name, panel["title"], values, numbers[metric])
                checked.add(metric)
            else:
                assert not values, (name, panel["title"])
    # every rule metric a dashboard shows is coloured at the rule's numbers
    assert {"inference_gpu_utilization_ratio", "inference_ttft_seconds", "inference_request_error_ratio",
            "inference_quality_score_mean", "inference_cost_budget_used_ratio"} <= checked


def test_colours_follow_the_rule_severity() -> None:
    service = dashboards()["service.json"]
    ttft = next(p for p in panels(service) if p["title"] == "Time to first token")
    assert ttft["fieldConfig"]["defaults"]["thresholds"]["steps"] == [
        {"color": "green", "value": None}, {"color": "red", "value": 1.0}]  # TTFTP99High is critical
    infra = dashboards()["infrastructure.json"]
    util = next(p for p in panels(infra) if p["title"] == "Utilization")
    assert [s["color"] for s in util["fieldConfig"]["defaults"]["thresholds"]["steps"]] == ["orange", "green", "orange"]


def test_objective_lines_and_links() -> None:
    exprs = {q.expr for q in queries() if q.dashboard in ("overview.json", "service.json")}
    assert 'inference_slo_objective_seconds{objective="ttft"}' in exprs
    assert 'inference_slo_objective_seconds{objective="tpot"}' in exprs
    for board in dashboards().values():
        assert any(link["type"] == "dashboards" and "inference-monitor" in link["tags"] for link in board["links"])
        assert board["annotations"]["list"][0]["expr"] == 'ALERTS{alertstate="firing"}'
    quality_links = [link["url"] for link in dashboards()["quality.json"]["links"] if link["type"] == "link"]
    assert quality_links == ["${monitor_url}/reports/quality/${__to:date:YYYY-MM-DD}"]


def test_every_expression_names_catalogued_metrics() -> None:
    for query in queries():
        for metric in re.findall(r"\b(inference_\w+)", query.expr):
            assert metric in CATALOG, (query.dashboard, query.panel, metric)
    for _, _, variable in query_variables():
        assert re.search(r"label_values\((inference_\w+)", variable).group(1) in CATALOG  # type: ignore[union-attr]


def test_every_variable_a_query_uses_is_defined_on_its_dashboard() -> None:
    # Grafana leaves an undefined `$target` as text: `target=~"$target"` then matches nothing.
    unknown = [(q.dashboard, q.panel, q.expr) for q in queries() if undefined_variables(q.expr, q.defined)]
    boards = dashboards()
    unknown += [(name, var, query) for name, var, query in query_variables()
                if undefined_variables(query, defined_variables(boards[name]))]
    assert not unknown, unknown


def test_an_undefined_variable_stays_literal_as_in_grafana() -> None:
    expanded = substitute('m{target=~"$target",model=~"$model"}', frozenset({"model"}))
    assert expanded == 'm{target=~"$target",model=~".*"}'


def test_every_expression_is_valid_promql(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    rules = [{"record": f"dashboard:check:{i}", "expr": substitute(q.expr, q.defined)} for i, q in enumerate(queries())]
    rules.append({"record": "dashboard:check:annotation", "expr": 'ALERTS{alertstate="firing"}'})
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout


def test_prometheus_rule_carries_exactly_the_shipped_rules() -> None:
    rule = yaml.safe_load((ROOT / "deploy/k8s/prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    shipped = [group for path in sorted((ROOT / "alerts").glob("*.yml"))
               for group in yaml.safe_load(path.read_text())["groups"]]
    assert rule["spec"]["groups"] == shipped


def test_dashboard_configmaps_carry_exactly_the_shipped_dashboards() -> None:
    maps = list(yaml.safe_load_all((ROOT / "deploy/k8s/grafana-dashboards.yaml").read_text()))
    assert all(m["metadata"]["labels"]["grafana_dashboard"] == "1" for m in maps)
    carried = {key: text for m in maps for key, text in m["data"].items()}
    assert carried == {path.name: path.read_text() for path in (ROOT / "dashboards").glob("*.json")}


@pytest.mark.parametrize("name", sorted(UIDS))
def test_panels_fit_the_grid(name: str) -> None:
    for panel in dashboards()[name]["panels"]:
        position = panel["gridPos"]
        assert position["x"] + position["w"] <= 24 and position["h"] > 0


def test_committed_json_round_trips_through_the_sdk_model() -> None:
    """Read back with the SDK's typed Dashboard model (Grafana's schema) and written again: nothing lost or unknown."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    for name, board in dashboards().items():
        again = json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))
        assert again == board, name


def test_the_generator_command_has_help_and_refuses_a_missing_root(tmp_path: Path) -> None:
    """`--help` is help (it once wrote the files into a folder named `--help`); a root that is not
    there is an error naming it, and nothing is written."""
    command = [sys.executable, "-m", "monitor.dashboards"]
    shown = subprocess.run([*command, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0 and "usage: python -m monitor.dashboards" in shown.stdout
    missing = tmp_path / "nowhere"
    refused = subprocess.run([*command, str(missing)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                             check=False)
    assert refused.returncode == 2 and f"{missing} is not a directory" in refused.stderr
    assert list(tmp_path.iterdir()) == []
