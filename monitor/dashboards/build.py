"""Grafana's JSON model of each dashboard, built with Grafana's typed SDK (grafana-foundation-sdk).

Panel ids and grid positions are assigned in layout order, so the same layouts always give the
same JSON (a test regenerates and compares with the committed files).
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

from monitor.dashboards.layouts import DASHBOARDS
from monitor.dashboards.spec import DashboardSpec, PanelSpec, Variable
from monitor.dashboards.thresholds import steps_for
from monitor.rulefiles.thresholds import RuleThreshold, rule_thresholds

TAG = "inference-monitor"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
MONITOR_URL = "http://localhost:9480"  # what the browser reaches; the `monitor_url` text box changes it
QUALITY_REPORT = "${monitor_url}/reports/quality/${__to:date:YYYY-MM-DD}"
PANEL_HEIGHT = 8
GRID_WIDTH = 24


def _thresholds(panel: PanelSpec, rules: list[RuleThreshold]) -> gd.ThresholdsConfig:
    steps = steps_for(panel.metric, rules) if panel.thresholds else []
    return (gd.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE)
            .steps([model.Threshold(value, colour) for value, colour in steps or [(None, "green")]]))


def _panel(panel: PanelSpec, rules: list[RuleThreshold], panel_id: int) -> stat.Panel | timeseries.Panel:
    builder: stat.Panel | timeseries.Panel
    if panel.kind == "stat":
        builder = (stat.Panel().graph_mode(common.BigValueGraphMode.AREA).color_mode(common.BigValueColorMode.VALUE)
                   .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"])))
    else:
        builder = timeseries.Panel().fill_opacity(10).thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED))
    builder.id(panel_id).title(panel.title).description(panel.help).datasource(DATASOURCE).unit(panel.panel_unit)
    builder.thresholds(_thresholds(panel, rules)).height(PANEL_HEIGHT).span(panel.width)
    for index, query in enumerate(panel.queries):
        builder.with_target(prometheus.Dataquery().expr(query.expr).legend_format(query.legend or "__auto")
                            .ref_id(chr(ord("A") + index)).datasource(DATASOURCE))
    return builder


def _variable(variable: Variable) -> gd.QueryVariable:
    builder = (gd.QueryVariable(variable.name).label(variable.name).datasource(DATASOURCE)
               .query(variable.query).refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
               .sort(model.VariableSort.ALPHABETICAL_ASC))
    if variable.include_all:
        builder.include_all(True).all_value(".*").multi(True)
    return builder


def _links(spec: DashboardSpec) -> list[gd.DashboardLink]:
    links = [gd.DashboardLink("Inference monitor").type(model.DashboardLinkType.DASHBOARDS).tags([TAG])
             .as_dropdown(True).include_vars(True).keep_time(True)]
    if spec.uid.endswith(("overview", "quality")):
        links.append(gd.DashboardLink("Quality report (the day at the end of the range)")
                     .type(model.DashboardLinkType.LINK).url(QUALITY_REPORT).target_blank(True).icon("doc"))
    return links


def dashboard(spec: DashboardSpec, rules: list[RuleThreshold]) -> dict[str, Any]:
    """The JSON model of one dashboard (a dict, as Grafana stores it)."""
    builder = (gd.Dashboard(spec.title).uid(spec.uid).description(spec.description).tags([TAG, *spec.tags])
               .editable().time("now-3h", "now").refresh("30s").tooltip(model.DashboardCursorSync.CROSSHAIR)
               .timezone("browser"))
    builder.with_variable(gd.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    for variable in spec.variables:
        builder.with_variable(_variable(variable))
    builder.with_variable(gd.TextBoxVariable("monitor_url").label("Monitor URL").default_value(MONITOR_URL)
                          .current(model.VariableOption(text=MONITOR_URL, value=MONITOR_URL)))
    builder.annotation(gd.AnnotationQuery().name("Alerts firing").datasource(DATASOURCE).enable(True)
                       .icon_color("red").expr('ALERTS{alertstate="firing"}'))
    for link in _links(spec):
        builder.link(link)
    panel_id = 0
    for row in spec.rows:
        panel_id += 1
        builder.with_row(gd.Row(row.title).id(panel_id))
        for panel in row.panels:
            panel_id += 1
            builder.with_panel(_panel(panel, rules, panel_id))
    encoded: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return encoded


def render_all() -> dict[str, str]:
    """File name -> JSON text of every dashboard, as committed under dashboards/."""
    rules = rule_thresholds()
    return {f"{spec.uid.removeprefix('infermon-')}.json": json.dumps(dashboard(spec, rules), indent=2, sort_keys=True)
            + "\n" for spec in DASHBOARDS}
