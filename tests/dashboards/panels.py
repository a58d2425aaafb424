"""The committed dashboards read back as data: every panel's queries, every variable, with Grafana's
variables replaced by values Prometheus accepts (the All value `.*` for the multi-value ones)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    expr: str

    def promql(self, window: str = "1m") -> str:
        return substitute(self.expr, window)


def substitute(expr: str, window: str = "1m") -> str:
    """Grafana's variables as a dashboard opened with All selected and `window` picked would send them."""
    for name, value in (("$__rate_interval", "1m"), ("$__range", "5m"), ("$window", window)):
        expr = expr.replace(name, value)
    return re.sub(r"\$(target|model|node|gpu)\b", ".*", expr)


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: load(path) for path in sorted(DASHBOARDS.glob("*.json"))}


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (panel for panel in board["panels"] if panel["type"] != "row")


def queries() -> list[PanelQuery]:
    return [PanelQuery(name, panel["title"], target["expr"])
            for name, board in dashboards().items() for panel in panels(board) for target in panel["targets"]]


def query_variables() -> list[tuple[str, str, str]]:
    """(dashboard, variable, label_values query) of every query variable."""
    return [(name, var["name"], var["query"]) for name, board in dashboards().items()
            for var in board["templating"]["list"] if var["type"] == "query"]
