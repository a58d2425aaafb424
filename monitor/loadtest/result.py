"""The result file: one JSON document, `schema_version` first among what a reader checks.

    {"schema": "infermon-bench", "schema_version": 1, "created", "target", "model", "synthetic",
     "warmup": {"requests", "failed", "excluded": true},
     "stopped": null | why (every request of the warm-up or a window failed: the run ended there),
     "capacity": {"concurrency", "bound", "words", "probes"}   (a --capacity search only),
     "conditions": {"workload": {..., "lengths" (asked), "lengths_from", "lengths_exact" (the engine's
                                 tokenizer), "served" (the server's usage), "levels" (that ran)},
                    "gpu", "server": {..., "slots"}, "user", "price", "tool"},
     "levels": [{"level": {"kind", "value", "label"},
                 "repeats": [<one window's figures>, ...],
                 "summary": <each figure as {"mean", "stdev", "min", "max", "n"} over the repeats>,
                 "ttft_samples_s": [...]}]}

A reader refuses a file of another schema or a newer version, naming the file and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from monitor.loadtest import SCHEMA_VERSION


class ResultError(ValueError):
    pass


def write_result(result: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")


def load_result(path: str | Path) -> dict[str, Any]:
    where = Path(path)
    try:
        data = json.loads(where.read_text())
    except OSError as exc:
        raise ResultError(f"{where}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise ResultError(f"{where}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != "infermon-bench":
        raise ResultError(f"{where}: not an infermon bench result")
    version = data.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ResultError(f"{where}: schema_version {version!r}; this infermon reads up to {SCHEMA_VERSION}")
    if not isinstance(data.get("levels"), list) or not data["levels"]:
        raise ResultError(f"{where}: no measured levels")
    return data


def figure(level: dict[str, Any], *path: str) -> dict[str, Any] | None:
    """One figure's spread over the repeats: figure(level, "ttft_s", "p99") -> {"mean", "stdev", …}."""
    value: Any = level.get("summary")
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) and "mean" in value else None
