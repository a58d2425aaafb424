"""Scenarios: the request lengths a run aims at and the load levels it steps through.

    chat    ≈200 input / 100 output tokens, many concurrent users (latency: P99 TTFT < 500 ms)
    batch   ≈5,000 input / 2,000 output tokens, ~10 concurrent (throughput)
    mixed   four chat requests to one batch request

A scenario file (JSON or YAML) spells the same thing out:

    name: support-bot
    classes: [{name: short, share: 0.9, input_tokens: 150, output_tokens: 80},
              {name: long, share: 0.1, input_tokens: 3000, output_tokens: 600}]
    concurrency: [1, 16, 64]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class ScenarioError(ValueError):
    pass


@dataclass(frozen=True)
class RequestClass:
    name: str
    share: float
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Scenario:
    name: str
    classes: tuple[RequestClass, ...]
    concurrency: tuple[int, ...]  # the levels a run steps through unless --concurrency/--rate say otherwise

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "classes": [vars(c) for c in self.classes], "concurrency": list(self.concurrency)}


_CHAT = RequestClass("chat", 1.0, 200, 100)
_BATCH = RequestClass("batch", 1.0, 5000, 2000)
BUILT_IN: dict[str, Scenario] = {
    "chat": Scenario("chat", (_CHAT,), (1, 8, 32, 128)),
    "batch": Scenario("batch", (_BATCH,), (1, 4, 10)),
    "mixed": Scenario("mixed", (RequestClass("chat", 0.8, 200, 100), RequestClass("batch", 0.2, 5000, 2000)),
                      (1, 8, 32)),
}


def load_scenario(name_or_path: str) -> Scenario:
    if name_or_path in BUILT_IN:
        return BUILT_IN[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        raise ScenarioError(f"--scenario: {name_or_path!r} is neither {', '.join(BUILT_IN)} nor a file")
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{path}: cannot read: {exc}") from None
    return _parse(data, str(path))


def _parse(data: Any, where: str) -> Scenario:
    if not isinstance(data, dict) or not isinstance(data.get("classes"), list) or not data["classes"]:
        raise ScenarioError(f"{where}: needs a non-empty 'classes' list")
    classes = []
    for i, entry in enumerate(data["classes"]):
        try:
            cls = RequestClass(str(entry.get("name", f"class{i}")), float(entry.get("share", 1.0)),
                               int(entry["input_tokens"]), int(entry["output_tokens"]))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ScenarioError(f"{where}: classes[{i}]: needs input_tokens and output_tokens ({exc})") from None
        if cls.share <= 0 or cls.input_tokens < 1 or cls.output_tokens < 1:
            raise ScenarioError(f"{where}: classes[{i}]: share, input_tokens and output_tokens must be positive")
        classes.append(cls)
    levels = data.get("concurrency", [1, 8, 32])
    if not isinstance(levels, list) or not all(isinstance(c, int) and c >= 1 for c in levels) or not levels:
        raise ScenarioError(f"{where}: concurrency must be a list of positive integers")
    return Scenario(str(data.get("name", Path(where).stem)), tuple(classes), tuple(levels))
