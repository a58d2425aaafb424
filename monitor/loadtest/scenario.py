"""Scenarios: the request lengths a run aims at and the load levels it steps through.

    chat    ≈200 input / 100 output tokens, many concurrent users (latency: P99 TTFT < 500 ms)
    batch   ≈5,000 input / 2,000 output tokens, ~10 concurrent (throughput)
    mixed   four chat requests to one batch request
    long-context  8k-32k input tokens / 200 output, 24 sessions that each revisit their prefix: a KV
            cache that cannot hold them all swaps back or recomputes (the KV-tiering hypothesis)
    moe     chat lengths at rising load, for an MoE model's expert balance (the MoE hypothesis)

A scenario file (JSON or YAML) spells the same thing out:

    name: support-bot
    classes: [{name: short, share: 0.9, input_tokens: 150, output_tokens: 80},
              {name: long, share: 0.1, input_tokens: 3000, output_tokens: 600}]
    concurrency: [1, 16, 64]
    sessions: 24        # optional: requests revisit one of 24 prefixes per class (0: every prompt new)
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
    # Sessions per class whose prompts each request continues (a long conversation, an agent's context):
    # a request is one session's prefix plus a new turn. 0: every prompt is new.
    sessions: int = 0

    def describe(self) -> dict[str, Any]:
        """Its name and classes: a result records the levels that ran (`workload.levels`), not the
        scenario's default ones, which ran only when no --concurrency/--rate was given."""
        described: dict[str, Any] = {"name": self.name, "classes": [vars(c) for c in self.classes]}
        if self.sessions:
            described["sessions"] = self.sessions
        return described


_CHAT = RequestClass("chat", 1.0, 200, 100)
_BATCH = RequestClass("batch", 1.0, 5000, 2000)
BUILT_IN: dict[str, Scenario] = {
    "chat": Scenario("chat", (_CHAT,), (1, 8, 32, 128)),
    "batch": Scenario("batch", (_BATCH,), (1, 4, 10)),
    "mixed": Scenario("mixed", (RequestClass("chat", 0.8, 200, 100), RequestClass("batch", 0.2, 5000, 2000)),
                      (1, 8, 32)),
    "long-context": Scenario("long-context", (RequestClass("8k", 0.5, 8000, 200), RequestClass("16k", 0.3, 16000, 200),
                                              RequestClass("32k", 0.2, 32000, 200)), (1, 4, 8), sessions=24),
    "moe": Scenario("moe", (_CHAT,), (1, 8, 32, 64)),
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
    sessions = data.get("sessions", 0)
    if not isinstance(sessions, int) or isinstance(sessions, bool) or sessions < 0:
        raise ScenarioError(f"{where}: sessions must be a whole number >= 0")
    return Scenario(str(data.get("name", Path(where).stem)), tuple(classes), tuple(levels), sessions)
