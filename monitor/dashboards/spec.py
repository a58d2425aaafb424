"""The shape of a generated dashboard, as plain data (the layouts) turned into Grafana JSON by build.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from monitor.catalog import CATALOG


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class PanelSpec:
    """One panel: its queries, and the catalogued metric whose unit and alert thresholds it shows."""

    title: str
    metric: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # timeseries | stat
    unit: str | None = None  # None: from the metric's name (unit_of)
    description: str = ""
    width: int = 8
    thresholds: bool = True  # False where the panel shows a derived value the rules do not compare

    @property
    def panel_unit(self) -> str:
        return self.unit or unit_of(self.metric)

    @property
    def help(self) -> str:
        if self.description:
            return self.description
        definition = CATALOG.get(self.metric)
        return definition.help if definition else ""


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[PanelSpec, ...]


@dataclass(frozen=True)
class Variable:
    """A query variable: `label_values(<metric>{<filters>}, <label>)`."""

    name: str
    metric: str
    label: str
    filters: str = ""
    include_all: bool = True

    @property
    def query(self) -> str:
        selector = f"{self.metric}{{{self.filters}}}" if self.filters else self.metric
        return f"label_values({selector}, {self.label})"


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    tags: tuple[str, ...] = field(default=())

    @property
    def panels(self) -> list[PanelSpec]:
        return [panel for row in self.rows for panel in row.panels]


# Grafana unit ids by the metric name's base-unit suffix (Prometheus naming: base units, ratios 0-1).
_SUFFIX_UNITS = [
    ("_timestamp_seconds", "dateTimeAsIso"),
    ("_seconds", "s"),
    ("_bytes", "bytes"),
    ("_ratio", "percentunit"),
    ("_usd_per_hour", "currencyUSD"),
    ("_usd_per_million_tokens", "currencyUSD"),
    ("_usd_total", "currencyUSD"),
    ("_usd", "currencyUSD"),
    ("_celsius", "celsius"),
    ("_watts", "watt"),
    ("_hertz", "hertz"),
    ("_joules_total", "joule"),
    ("_requests_per_second", "reqps"),
    ("_tokens_per_second", "suffix: tok/s"),
    ("_per_second", "suffix: /s"),
]


def unit_of(metric: str) -> str:
    """The Grafana unit of a catalogued metric (`none` for counts, scores and 0/1 states)."""
    for suffix, unit in _SUFFIX_UNITS:
        if metric.endswith(suffix):
            return unit
    return "none"
