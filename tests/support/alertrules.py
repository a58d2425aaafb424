"""Short-interval copies of the shipped alert rules, and the firing sets of both evaluators.

Tests and benchmarks cannot wait ten minutes for `for: 10m`: the copy keeps every expression,
label and annotation, with `for` (and `keep_firing_for`) shortened and the 5-minute window
swapped for the short one the run configures. Both evaluators load the same copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from monitor.rulefiles.rules import SHIPPED_DIR

Labels = frozenset[tuple[str, str]]
SCRAPE_TARGET_LABELS = ("job", "instance")  # what Prometheus adds to every scraped series


def short_rules(directory: Path, for_: str | None = "2s", window: str = "10s",
                only: Iterable[str] | None = None) -> list[Path]:
    """Write copies of alerts/*.yml into `directory`; `only` keeps just those alert names."""
    keep = set(only) if only is not None else None
    paths = []
    for source in sorted(SHIPPED_DIR.glob("*.yml")):
        document: dict[str, Any] = yaml.safe_load(source.read_text())
        for group in document["groups"]:
            group["rules"] = [_shorten(rule, for_, window) for rule in group["rules"]
                              if keep is None or rule["alert"] in keep]
        target = directory / source.name
        target.write_text(yaml.safe_dump(document, sort_keys=False))
        paths.append(target)
    return paths


def _shorten(rule: dict[str, Any], for_: str | None, window: str) -> dict[str, Any]:
    rule = dict(rule)
    rule["expr"] = rule["expr"].replace('window="5m"', f'window="{window}"')
    if for_ is not None and "for" in rule:
        rule["for"] = for_
    rule.pop("keep_firing_for", None)
    return rule


def firing(alerts: Iterable[Mapping[str, Any]]) -> set[Labels]:
    """The label sets of the firing alerts in a /api/v1/alerts answer (Prometheus' or ours),
    without the target labels Prometheus adds to what it scrapes."""
    return {
        frozenset((k, v) for k, v in alert["labels"].items() if k not in SCRAPE_TARGET_LABELS)
        for alert in alerts if alert["state"] == "firing"
    }


def name_of(labels: Labels) -> str:
    return dict(labels).get("alertname", "")
