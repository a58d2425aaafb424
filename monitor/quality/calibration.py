"""Calibration: the judge is tested, in every run, on answers whose verdict is known.

A gold set is JSON lines, one known answer a line:

    {"prompt": "...", "response": "...", "score": 1-5, "refusal": false, "hallucination": true}

(`refusal`/`hallucination` optional: an item without one is not counted for that flag). The
shipped set (`monitor/data/judge_gold.jsonl`, English and Chinese, every score level) is used
unless `quality.judge.calibration` names another file (or `off`). Its items are judged blind:
the same template as the model's samples, shuffled among them, with no context or reference
that would tell them apart. A gold row is told from a sample by its key only (`gold:` + the
expected verdict + a digest of the item), which never reaches the judge; that key carries the
expected verdict, so a run resumed after a crash grades exactly what it asked, even if the file
changed in between.

The judge's agreement with the known verdicts (exact and within-1 accuracy, quadratic-weighted
Cohen's kappa, flag agreement, mean signed difference) decides whether the run's verdicts are
the model's: below the floors the run is uncalibrated and the model gets no score at all.
docs/judge-calibration.md explains the numbers and the defaults.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from monitor.config import JudgeSettings

SHIPPED_GOLD = Path(__file__).parent.parent / "data" / "judge_gold.jsonl"
GOLD_PREFIX = "gold:"
MIN_GOLD_ITEMS = 10  # fewer known answers measure nothing: kappa's interval on 10 is already ~±0.3
MIN_GOLD_LEVELS = 3  # score levels the set must cover, or kappa says little about the scale
MIN_ANSWERED_RATIO = 0.8  # gold items the judge must give a verdict on for the agreement to count
SCORES = (1, 2, 3, 4, 5)


class GoldSetError(ValueError):
    """A gold set that cannot be used, with the line and the reason."""


@dataclass(frozen=True)
class GoldItem:
    prompt: str
    response: str
    score: int
    refusal: bool | None = None
    hallucination: bool | None = None

    @property
    def key(self) -> str:
        """The gold row's sample key: the expected verdict, then a digest of the item (never sent)."""
        digest = hashlib.sha256(f"{self.prompt}\x00{self.response}".encode()).hexdigest()[:24]
        return f"{GOLD_PREFIX}{self.score}{_flag_code(self.refusal)}{_flag_code(self.hallucination)}:{digest}"


def _flag_code(flag: bool | None) -> str:
    return "-" if flag is None else "1" if flag else "0"


def is_gold(sample_key: str) -> bool:
    return sample_key.startswith(GOLD_PREFIX)


def expected(sample_key: str) -> tuple[int, bool | None, bool | None]:
    """(score, refusal, hallucination) a gold row's key says the judge should give."""
    code = sample_key[len(GOLD_PREFIX):].split(":", 1)[0]
    flags = {"1": True, "0": False, "-": None}
    return int(code[0]), flags[code[1]], flags[code[2]]


def load_gold(path: str | Path) -> list[GoldItem]:
    """The items of a JSON-lines gold set; GoldSetError names the first bad line and why."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GoldSetError(f"{path}: cannot read the gold set: {exc}") from None
    items: list[GoldItem] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        item = _item(line, f"{path}:{number}")
        if item.key in seen:
            raise GoldSetError(f"{path}:{number}: the same prompt and response twice")
        seen.add(item.key)
        items.append(item)
    if len(items) < MIN_GOLD_ITEMS:
        raise GoldSetError(f"{path}: {len(items)} known answers; a gold set needs at least {MIN_GOLD_ITEMS}")
    if len({i.score for i in items}) < MIN_GOLD_LEVELS:
        raise GoldSetError(f"{path}: the scores cover fewer than {MIN_GOLD_LEVELS} of the levels 1-5")
    return items


def _item(line: str, where: str) -> GoldItem:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise GoldSetError(f"{where}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise GoldSetError(f"{where}: not a JSON object")
    prompt, response, score = data.get("prompt"), data.get("response"), data.get("score")
    if not isinstance(prompt, str) or not prompt.strip() or not isinstance(response, str):
        raise GoldSetError(f"{where}: `prompt` (non-empty) and `response` must be strings")
    if isinstance(score, bool) or not isinstance(score, int) or score not in SCORES:
        raise GoldSetError(f"{where}: `score` must be an integer from 1 to 5, not {score!r}")
    flags: list[bool | None] = []
    for name in ("refusal", "hallucination"):
        value = data.get(name)
        if value is not None and not isinstance(value, bool):
            raise GoldSetError(f"{where}: `{name}` must be true or false, not {value!r}")
        flags.append(value)
    unknown = sorted(set(data) - {"prompt", "response", "score", "refusal", "hallucination"})
    if unknown:
        raise GoldSetError(f"{where}: unknown keys {unknown}")
    return GoldItem(prompt, response, score, flags[0], flags[1])


def gold_set(settings: JudgeSettings) -> list[GoldItem]:
    """The run's known answers: the configured file, the shipped set, or none (`off`)."""
    if settings.calibration is not None and settings.calibration.strip().lower() == "off":
        return []
    return load_gold(settings.calibration or SHIPPED_GOLD)


@dataclass(frozen=True)
class GoldVerdict:
    """A gold row as graded: what was expected and what the judge said (score None: no verdict)."""

    expected_score: int
    expected_refusal: bool | None
    expected_hallucination: bool | None
    score: int | None
    refusal: bool | None
    hallucination: bool | None


@dataclass(frozen=True)
class Agreement:
    items: int  # gold items in the run
    answered: int  # with a usable verdict
    exact_ratio: float | None
    within_one_ratio: float | None
    kappa: float | None  # quadratic-weighted Cohen's kappa; None where it is undefined
    refusal_agreement: float | None  # share of the items with an expected flag the judge matched
    hallucination_agreement: float | None
    bias: float | None  # mean of (judge's score - expected score): a harsher judge is negative


def quadratic_kappa(expected_scores: Sequence[int], judged: Sequence[int],
                    levels: Sequence[int] = SCORES) -> float | None:
    """Cohen's kappa with quadratic weights (Cohen 1968): 1 - sum(W*O) / sum(W*E), where O is the
    observed confusion matrix, E the one expected by chance from the two marginals and W the
    squared distance between levels. 1 is perfect agreement, 0 chance, below 0 worse than chance;
    None when the chance disagreement is 0 (both raters gave one and the same level)."""
    if len(expected_scores) != len(judged) or not judged:
        return None
    index = {level: i for i, level in enumerate(levels)}
    size = len(levels)
    observed = np.zeros((size, size))
    for a, b in zip(expected_scores, judged, strict=True):
        observed[index[a], index[b]] += 1
    chance = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    grid = np.arange(size)
    weights = (grid[:, None] - grid[None, :]) ** 2 / (size - 1) ** 2
    denominator = float((weights * chance).sum())
    if denominator == 0:
        return None
    return 1.0 - float((weights * observed).sum()) / denominator


def agreement(graded: Sequence[GoldVerdict]) -> Agreement:
    answered = [g for g in graded if g.score is not None]
    exp = [g.expected_score for g in answered]
    got = [g.score for g in answered if g.score is not None]
    diffs = [b - a for a, b in zip(exp, got, strict=True)]

    def share(hits: list[bool]) -> float | None:
        return sum(hits) / len(hits) if hits else None

    return Agreement(
        items=len(graded), answered=len(answered),
        exact_ratio=share([d == 0 for d in diffs]), within_one_ratio=share([abs(d) <= 1 for d in diffs]),
        kappa=quadratic_kappa(exp, got),
        refusal_agreement=share([bool(g.refusal) == g.expected_refusal for g in answered
                                 if g.expected_refusal is not None]),
        hallucination_agreement=share([bool(g.hallucination) == g.expected_hallucination for g in answered
                                       if g.expected_hallucination is not None]),
        bias=sum(diffs) / len(diffs) if diffs else None,
    )


def uncalibrated(found: Agreement, settings: JudgeSettings) -> str | None:
    """Why the judge's verdicts are not to be trusted this run (None: they are)."""
    if found.items == 0:
        return None
    if found.answered < MIN_ANSWERED_RATIO * found.items:
        return f"judge uncalibrated (verdicts on only {found.answered} of {found.items} known answers)"
    head = f"judge uncalibrated (κ {_kappa_text(found.kappa)} on {found.answered} known answers)"
    if found.kappa is None or found.kappa < settings.calibration_min_kappa:
        return f"{head}: below the floor κ {settings.calibration_min_kappa:g}"
    if found.within_one_ratio is not None and found.within_one_ratio < settings.calibration_min_within_one:
        return (f"{head}: within 1 point on {found.within_one_ratio * 100:.0f} %, below the floor "
                f"{settings.calibration_min_within_one * 100:.0f} %")
    for name, value in (("refusal", found.refusal_agreement), ("hallucination", found.hallucination_agreement)):
        if value is not None and value < settings.calibration_min_flag_agreement:
            return (f"{head}: the {name} flag agrees on {value * 100:.0f} %, below the floor "
                    f"{settings.calibration_min_flag_agreement * 100:.0f} %")
    return None


def _kappa_text(kappa: float | None) -> str:
    return "undefined" if kappa is None else f"{kappa:.2f}"
