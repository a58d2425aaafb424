"""Prompt files the user has -> the requests of a run, drawn to a scenario's lengths.

Two formats, nothing downloaded:

    ShareGPT JSON   [{"id": "…", "conversations": [{"from": "human", "value": "…"},
                                                   {"from": "gpt", "value": "…"}, …]}, …]
                    the first human turn is the prompt, the answer after it its reference length
    JSONL           one object a line: {"prompt": "…"} or {"text": "…"} or {"messages": [...]},
                    optionally "output_tokens"

Lengths before the run are estimated at four characters a token (no tokenizer here; the
run records what the server's `usage` counted). The requests are drawn with a seeded random
generator, so two systems compared get the same prompts in the same order.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from monitor.loadtest.scenario import Scenario
from monitor.loadtest.stats import distribution

CHARS_PER_TOKEN = 4.0
_LENGTH_BAND = (0.5, 1.5)  # a prompt fits a target when its length is within this factor of it


class DatasetError(ValueError):
    """A prompt file that cannot be read or holds no prompt: names the file and the reason."""


@dataclass(frozen=True)
class Prompt:
    messages: tuple[dict[str, str], ...]
    input_tokens: int  # estimated
    reference_output_tokens: int | None = None  # the dataset's own answer, estimated


@dataclass(frozen=True)
class Request:
    messages: tuple[dict[str, str], ...]
    input_tokens: int  # estimated
    max_tokens: int
    kind: str  # the scenario class it was drawn for ("chat", "batch")


@dataclass(frozen=True)
class Dataset:
    source: str  # "sharegpt" | "jsonl" | "synthetic"
    path: str | None
    sha256: str | None
    prompts: tuple[Prompt, ...]
    unique: bool = False  # a new prompt per request (generated), none sent twice in a run

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "sha256": self.sha256, "prompts": len(self.prompts),
                "synthetic": self.source == "synthetic", "unique_per_request": self.unique}


def estimate_tokens(text: str) -> int:
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def load_dataset(path: str | Path) -> Dataset:
    where = Path(path)
    try:
        raw = where.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{where}: cannot read: {exc.strerror}") from None
    text = raw.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            prompts, source = _sharegpt(json.loads(text)), "sharegpt"
        except ValueError as exc:
            raise DatasetError(f"{where}: not valid ShareGPT JSON: {exc}") from None
    else:
        prompts, source = _jsonl(text, where), "jsonl"
    if not prompts:
        raise DatasetError(f"{where}: no prompt found (ShareGPT JSON list or JSONL with prompt/text/messages)")
    return Dataset(source, str(where), hashlib.sha256(raw).hexdigest(), tuple(prompts))


def _sharegpt(data: Any) -> list[Prompt]:
    prompts = []
    for entry in data if isinstance(data, list) else []:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            continue
        for i, turn in enumerate(turns):
            if isinstance(turn, dict) and turn.get("from") in ("human", "user") and isinstance(turn.get("value"), str):
                answer = turns[i + 1] if i + 1 < len(turns) and isinstance(turns[i + 1], dict) else {}
                reference = answer.get("value") if isinstance(answer.get("value"), str) else None
                prompts.append(_prompt(turn["value"], estimate_tokens(reference) if reference else None))
                break
    return [p for p in prompts if p.messages[0]["content"].strip()]


def _jsonl(text: str, where: Path) -> list[Prompt]:
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise DatasetError(f"{where}:{number}: not a JSON line: {exc}") from None
        prompt = _jsonl_entry(entry)
        if prompt is None:
            raise DatasetError(f"{where}:{number}: needs a 'prompt', 'text' or 'messages' field")
        prompts.append(prompt)
    return prompts


def _jsonl_entry(entry: Any) -> Prompt | None:
    if isinstance(entry, str):
        return _prompt(entry, None)
    if not isinstance(entry, dict):
        return None
    output = entry.get("output_tokens")
    reference = int(output) if isinstance(output, int | float) and output > 0 else None
    for key in ("prompt", "text"):
        if isinstance(entry.get(key), str):
            return _prompt(entry[key], reference)
    messages = entry.get("messages")
    if isinstance(messages, list) and messages and all(
        isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
    ):
        chat = tuple({"role": str(m.get("role", "user")), "content": m["content"]} for m in messages)
        return Prompt(chat, sum(estimate_tokens(m["content"]) for m in chat), reference)
    return None


def _prompt(text: str, reference: int | None) -> Prompt:
    return Prompt(({"role": "user", "content": text},), estimate_tokens(text), reference)


# Enough words that two generated prompts share a prefix of a word or two by chance, never a
# prefix-cache block (16 tokens in vLLM).
_WORDS = (
    "the", "model", "answer", "question", "report", "explain", "network", "summary", "detail", "energy", "system",
    "latency", "history", "river", "garden", "market", "language", "signal", "careful", "number", "window",
    "harbor", "silver", "mountain", "letter", "engine", "budget", "theory", "simple", "orange", "winter",
    "village", "measure", "picture", "kitchen", "doctor", "planet", "stable", "quiet", "method", "island",
    "teacher", "review", "battery", "crystal", "museum", "pattern", "voltage", "meadow", "thunder", "compass",
    "library", "velvet", "harvest", "lantern", "circuit", "granite", "whisper", "journey", "factory", "canvas",
    "feather", "glacier", "cabinet", "horizon", "mirror", "nickel", "parade", "quantum", "ribbon", "saddle",
    "tunnel", "umbrella", "vessel", "walnut", "yellow", "zipper", "anchor", "basket", "candle", "dragon", "elbow",
    "fabric"
)
_LONGEST = max(len(w) for w in _WORDS)
UNIQUE_LIMIT = 2**62  # a stream of generated requests has no end a run could reach


def synthetic_dataset(scenario: Scenario, seed: int = 0, per_class: int = 64) -> Dataset:
    """Word salad at each class's input length (asked for with --synthetic; the report says so).
    Random words, not one repeated token: a repeated token is the named pitfall (prefix caches
    and tokenizers treat it unlike real text). The run draws a new prompt for every request
    (`SyntheticRequests`); these few stand for them in `describe()`."""
    prompts = [_prompt(_salad(random.Random(f"{seed}/sample/{cls.name}/{i}"), cls.input_tokens), cls.output_tokens)
               for cls in scenario.classes for i in range(per_class)]
    return Dataset("synthetic", None, None, tuple(prompts), unique=True)


def _salad(rng: random.Random, input_tokens: int) -> str:
    target = int(input_tokens * CHARS_PER_TOKEN)
    # Most of the words in one call (the longest word and its space are 9 characters: never past the
    # target), then one at a time up to it, as a prompt ends within a word of its length.
    words = rng.choices(_WORDS, k=max(1, target // (_LONGEST + 1)))
    text = " ".join(words)
    while len(text) < target:
        text += " " + rng.choice(_WORDS)
    return text


class SyntheticRequests(Sequence[Request]):
    """Request i of a run: a class by its share, a prompt of random words at its length; made when
    asked for, from (seed, i) alone, so the same seed gives the same prompts and no two requests of
    a run share one (request i's number closes its prompt)."""

    def __init__(self, scenario: Scenario, seed: int = 0) -> None:
        self.scenario, self.seed = scenario, seed
        self._weights = [cls.share for cls in scenario.classes]

    def __len__(self) -> int:
        return UNIQUE_LIMIT

    @overload
    def __getitem__(self, index: int) -> Request: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Request]: ...

    def __getitem__(self, index: int | slice) -> Request | Sequence[Request]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not 0 <= index < UNIQUE_LIMIT:
            raise IndexError(index)
        rng = random.Random(f"{self.seed}/{index}")
        cls = self.scenario.classes[rng.choices(range(len(self._weights)), self._weights)[0]]
        if self.scenario.sessions:  # one session's prefix (made from its number alone), then a new turn
            session = rng.randrange(self.scenario.sessions)
            text = f"{_salad(random.Random(f'{self.seed}/session/{cls.name}/{session}'), cls.input_tokens)} ({index})"
        else:
            text = f"{_salad(rng, cls.input_tokens)} ({index})"
        return Request(({"role": "user", "content": text},), estimate_tokens(text), cls.output_tokens, cls.name)


def draw_requests(dataset: Dataset, scenario: Scenario, count: int, seed: int = 0) -> Sequence[Request]:
    """`count` requests: each picks a scenario class by its share, then a prompt near the class's
    input length (within 0.5-1.5x; the nearest tenth of the prompts when none is), and asks for
    the class's output length. A generated data set gives a stream of new requests instead."""
    if dataset.unique:
        return SyntheticRequests(scenario, seed)
    rng = random.Random(seed)
    pools = [_near(dataset.prompts, cls.input_tokens) for cls in scenario.classes]
    weights = [cls.share for cls in scenario.classes]
    requests = []
    for _ in range(count):
        index = rng.choices(range(len(pools)), weights)[0]
        cls, prompt = scenario.classes[index], rng.choice(pools[index])
        requests.append(Request(prompt.messages, prompt.input_tokens, cls.output_tokens, cls.name))
    return requests


def _near(prompts: Sequence[Prompt], target: int) -> list[Prompt]:
    low, high = _LENGTH_BAND
    fitting = [p for p in prompts if low * target <= p.input_tokens <= high * target]
    if fitting:
        return fitting
    ranked = sorted(prompts, key=lambda p: abs(p.input_tokens - target))
    return ranked[: max(1, len(ranked) // 10)]


def length_stats(requests: Sequence[Request]) -> dict[str, dict[str, float | None]]:
    """Mean, P50, P95, P99 of what the run sends: estimated input tokens, requested output tokens."""
    return {"input_tokens": distribution([r.input_tokens for r in requests]),
            "output_tokens": distribution([r.max_tokens for r in requests])}
