"""The committed dashboards read back as data: every panel's queries, every variable, with Grafana's
variables replaced as Grafana replaces them: a variable the dashboard defines becomes its value
(the All value `.*` for the multi-value ones), one it does not define stays literal text (so
`target=~"$target"` on a dashboard without `target` matches nothing, as it does in Grafana)."""

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


BUILTINS = {"__rate_interval": "1m", "__range": "5m", "__interval": "1m"}
VARIABLE = re.compile(r"\$(\w+)\b")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    expr: str
    defined: frozenset[str] = frozenset()  # the dashboard's variable names

    def promql(self, window: str = "1m") -> str:
        return substitute(self.expr, self.defined, window)


def substitute(expr: str, defined: frozenset[str], window: str = "1m") -> str:
    """Grafana's variables as a dashboard opened with All selected and `window` picked would send them;
    a name the dashboard does not define is left as it is, as Grafana leaves it."""
    def value(match: re.Match[str]) -> str:
        name = match[1]
        if name in BUILTINS:
            return BUILTINS[name]
        if name not in defined:
            return match[0]
        return window if name == "window" else ".*"
    return VARIABLE.sub(value, expr)


def undefined_variables(expr: str, defined: frozenset[str]) -> set[str]:
    return {name for name in VARIABLE.findall(expr) if name not in defined and name not in BUILTINS}


def defined_variables(board: dict[str, Any]) -> frozenset[str]:
    return frozenset(var["name"] for var in board["templating"]["list"])


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: load(path) for path in sorted(DASHBOARDS.glob("*.json"))}


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (panel for panel in board["panels"] if panel["type"] != "row")


def queries() -> list[PanelQuery]:
    return [PanelQuery(name, panel["title"], target["expr"], defined_variables(board))
            for name, board in dashboards().items() for panel in panels(board) for target in panel["targets"]]


def query_variables() -> list[tuple[str, str, str]]:
    """(dashboard, variable, label_values query) of every query variable."""
    return [(name, var["name"], var["query"]) for name, board in dashboards().items()
            for var in board["templating"]["list"] if var["type"] == "query"]


def expanded_variables() -> list[tuple[str, str, str]]:
    """query_variables() with the other variables expanded as Grafana expands them (All selected)."""
    boards = dashboards()
    return [(name, var, substitute(query, defined_variables(boards[name]))) for name, var, query in query_variables()]
