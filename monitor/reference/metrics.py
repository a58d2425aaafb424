"""docs/metrics.md: every family the monitor exports, from the catalog (`monitor/catalog.py`).

    python -m monitor.reference.metrics > docs/metrics.md
"""

from __future__ import annotations

from monitor.catalog import CATALOG, MetricDef

# The order a reader meets the layers in; a layer the catalog gains later is listed after these.
LAYER_TITLES = {
    "service": "Service (the serving engines' pages)",
    "infra": "Infrastructure (GPUs: NVML, dcgm-exporter, a replayed trace)",
    "canary": "Canary (synthetic users through the OpenAI-compatible API)",
    "quality": "Quality (the daily LLM-judge run)",
    "cost": "Cost",
    "self": "The monitor itself",
    "store": "The monitor's store",
    "alerting": "Alerting and delivery",
}


def cell(text: str) -> str:
    """Text that stays inside one markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _row(definition: MetricDef) -> str:
    labels = ", ".join(f"`{label}`" for label in definition.labels) or "(none)"
    return f"| `{definition.name}` | {definition.type} | {labels} | {cell(definition.help)} |"


def markdown() -> str:
    layers = list(LAYER_TITLES) + sorted({d.layer for d in CATALOG.values()} - set(LAYER_TITLES))
    lines = ["# Metrics", "",
             "Generated from `monitor/catalog.py` (`python -m monitor.reference.metrics > docs/metrics.md`);",
             "a test keeps the two equal, and another that what a full scenario exports equals the catalog.",
             "Every family is rendered fresh on each `GET /metrics`; a family without a value (a field the",
             "GPU does not support, a quantile without observations) is absent, never 0.", "",
             "Conventions: base units (seconds, bytes, watts, joules, hertz), ratios 0-1, `_total` only on",
             "counters. A family with a `quantile` label is a summary (quantiles over the sliding `window`:",
             "`1m`, `5m` by default, `service.windows`). Service families come per `{target, model, window}`",
             "and fleet-wide per `{model, window}` (no `target` label); cost families fleet-wide without",
             "labels, and per target or model where `service.targets` say which GPUs serve them.", ""]
    counts = ", ".join(f"{layer} {sum(d.layer == layer for d in CATALOG.values())}" for layer in layers)
    lines += [f"{len(CATALOG)} families: {counts}.", ""]
    for layer in layers:
        # The catalog's order, not the alphabet's: related families stay together.
        definitions = [d for d in CATALOG.values() if d.layer == layer]
        if not definitions:
            continue
        lines += [f"## {LAYER_TITLES.get(layer, layer)}", "", "| metric | type | labels | meaning |",
                  "|--------|------|--------|---------|"]
        lines += [_row(d) for d in definitions]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
