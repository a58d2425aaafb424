"""A judge's reason that is not language is a tell, in any script; real reasons of any language pass."""

from __future__ import annotations

import pytest

from monitor.quality.checks import Judged, suspect_verdicts
from monitor.quality.language import nonlanguage
from monitor.sim.judge import _REASONS

NOISE = [
    "rltu& smno3atid woc p4U0…",  # what llama-server with tiny random weights answered (#42)
    "%%%$$##@@!! ~~~ ^^^",
    "qwrt zxcv plmk bnmj hgfd",
    "xkcd lorem fjdk slaq pwoe ruty",
    "a8f3 k2l9 zz01 q7w8",
    "鑫齉龘爨靐麤鱻驫",  # Han characters, none a sentence is made of
    "ab3X 9Qz! wE4r Ty7u",
]
LANGUAGE = [
    *_REASONS.values(),
    "The response is correct and complete.",
    "Mostly correct, but it names the wrong year (1923).",
    "The answer states 15% of 200 is 15; the correct value is 30.",
    "Correct, e.g. it names Paris.",
    "See https://en.wikipedia.org/wiki/Paris for the source.",
    "The SQL query SELECT * FROM users is wrong.",
    "Adequate.",
    "ok",
    "回答正确，内容完整。",
    "该回答拒绝了合理的请求。",
    "応答は正しいです。",
    "응답이 정확합니다.",
    "Ответ правильный и полный.",
    "La réponse est correcte mais incomplète.",
    "Die Antwort ist falsch.",
    "El modelo se niega a responder.",
]


@pytest.mark.parametrize("reason", NOISE)
def test_noise_is_not_language(reason: str) -> None:
    assert nonlanguage(reason)


@pytest.mark.parametrize("reason", LANGUAGE)
def test_language_is(reason: str) -> None:
    assert not nonlanguage(reason)


def test_a_noise_reason_makes_its_verdict_suspect() -> None:
    judged = [Judged(4, False, False, False, None, 10, reason=r, response=f"r{i}")
              for i, r in enumerate(["Correct and clear.", NOISE[0], "回答正确。"])]
    assert suspect_verdicts(judged) == [False, True, False]
