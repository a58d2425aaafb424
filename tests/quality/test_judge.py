"""The judge through the real `openai` SDK against a scripted server on loopback."""

from __future__ import annotations

import asyncio

import pytest

from monitor.config import JudgeSettings
from monitor.quality.judge import Judge, JudgeInput, UnparseableAnswer, parse_answer
from monitor.quality.store import Verdict
from tests.quality.judgeserver import JudgeScript, judge_server

PRICES = {"usd_per_million_input_tokens": 1.25, "usd_per_million_output_tokens": 10.0}  # a hosted judge's

ITEM = JudgeInput(prompt="What is the capital of France?", response="The capital of France is Paris, on the Seine.")


def judge_once(script: JudgeScript, item: JudgeInput = ITEM, **settings: object) -> tuple[Verdict, int]:
    with judge_server(script) as url:
        config = JudgeSettings(base_url=url, model="judge-test", **{**PRICES, **settings})  # type: ignore[arg-type]

        async def run() -> tuple[Verdict, int]:
            judge = Judge(config, "test-key", backoff_s=0.01)
            try:
                return await judge.judge(item), judge.calls
            finally:
                await judge.aclose()

        return asyncio.run(run())


def test_good_answer_with_structured_output_and_cost() -> None:
    script = JudgeScript()
    verdict, calls = judge_once(script)
    assert verdict.error is None and verdict.score in range(1, 6) and verdict.refusal is False
    assert calls == 1 and verdict.attempts == 1
    body = script.bodies[0]
    assert body["temperature"] == 0 and body["model"] == "judge-test"
    assert body["response_format"]["type"] == "json_schema"
    assert set(body["response_format"]["json_schema"]["schema"]["required"]) == {
        "score", "refusal", "hallucination", "reason"}
    assert "capital of France" in body["messages"][0]["content"]
    assert (verdict.input_tokens, verdict.output_tokens) == (1000, 50)
    assert verdict.cost_usd == pytest.approx((1000 * 1.25 + 50 * 10.0) / 1e6)


@pytest.mark.parametrize("behaviour", ["fenced", "text"])
def test_tolerant_parser_reads_unstructured_answers(behaviour: str) -> None:
    verdict, calls = judge_once(JudgeScript(default=behaviour))
    assert verdict.error is None and verdict.score in range(1, 6) and calls == 1


def test_malformed_json_is_retried_once_then_a_judge_error() -> None:
    script = JudgeScript(default="malformed")
    verdict, calls = judge_once(script)
    assert verdict.score is None and verdict.error is not None and "unparseable" in verdict.error
    assert calls == 2
    assert verdict.cost_usd > 0  # the tokens of failed answers are paid for too

    script = JudgeScript()
    script.script.append("malformed")
    verdict, calls = judge_once(script)
    assert verdict.error is None and verdict.score is not None and calls == 2


def test_429_then_success_honours_retry_after() -> None:
    script = JudgeScript()
    script.script.extend(["429", "429"])
    verdict, calls = judge_once(script)
    assert verdict.error is None and verdict.score is not None
    assert calls == 3 and verdict.attempts == 3


def test_hang_past_the_timeout_is_retried_then_an_error() -> None:
    script = JudgeScript(default="hang", hang_s=1.5)
    verdict, calls = judge_once(script, timeout="0.3s", max_retries=1)
    assert verdict.score is None and verdict.error == "timed out after 0.3s"
    assert calls == 2


def test_hang_once_then_answer() -> None:
    script = JudgeScript(hang_s=1.5)
    script.script.append("hang")
    verdict, calls = judge_once(script, timeout="0.3s", max_retries=2)
    assert verdict.error is None and calls == 2


def test_5xx_exhausts_retries_with_the_cause() -> None:
    verdict, calls = judge_once(JudgeScript(default="500"), max_retries=2)
    assert verdict.score is None and verdict.error == "HTTP 500: upstream died" and calls == 3


def test_server_without_structured_output_falls_back() -> None:
    script = JudgeScript(default="reject_schema")
    verdict, calls = judge_once(script)
    assert verdict.error is None and verdict.score is not None and calls == 2
    assert "response_format" in script.bodies[0] and "response_format" not in script.bodies[1]


@pytest.mark.parametrize(("content", "expected"), [
    ('{"score": 4, "refusal": false, "hallucination": true, "reason": "ok"}', (4, False, True, "ok")),
    ('{"Score": "2", "refusal": "yes", "hallucination": "no", "reason": "bad"}', (2, True, False, "bad")),
    ('Sure!\n```json\n{"score": 5.0, "refusal": false, "hallucination": false, "reason": "x"}\n```',
     (5, False, False, "x")),
    ("Feedback: thin.\nScore: 3\nRefusal: false\nHallucination: true\nReason: gaps", (3, False, True, "gaps")),
    ("The answer is fine. [RESULT] 4", (4, False, False, "The answer is fine. [RESULT] 4")),
    ("评价：回答准确。\n评分：4", (4, False, False, "评价：回答准确。\n评分：4")),
])
def test_parse_answer(content: str, expected: tuple[int, bool, bool, str]) -> None:
    assert parse_answer(content) == expected


# #48 item 5: an answer that says "Score: 5" is quoted by an honest judge before its own verdict.
# The first score in the text was taken: the answer under judgment chose its own score.
@pytest.mark.parametrize(("content", "expected"), [
    ('The response ends with "Score: 5", which the rubric does not allow.\nScore: 1\nRefusal: false\n'
     "Hallucination: true\nReason: it grades itself", (1, False, True, "it grades itself")),
    ("The response writes [RESULT] 5 to steer the grader. It is wrong. [RESULT] 1", 1),
    ("Feedback: it claims [RESULT] 5 and Score: 5 for itself.\nScore: 2", 2),
    ("回答末尾写着“评分：5”，试图影响评判。\n评分：1", 1),
    ("The answer quotes 分数：5 from the prompt.\n分数：2\n拒答：否", 2),
    ("Refusal: true (the answer says 'Refusal: true' is wrong) ... on reflection Refusal: false. Score: 3",
     (3, False, False, "Refusal: true (the answer says 'Refusal: true' is wrong) ... on reflection "
                       "Refusal: false. Score: 3")),
])
def test_the_judges_last_verdict_counts_not_a_score_it_quotes(content: str,
                                                               expected: tuple[int, bool, bool, str] | int) -> None:
    parsed = parse_answer(content)
    if isinstance(expected, int):
        assert parsed[0] == expected
    else:
        assert parsed == expected


@pytest.mark.parametrize("content", ["", '{"score": 7}', '{"score": 3.5}', "no idea", '{"refusal": true}'])
def test_parse_answer_rejects_what_has_no_valid_score(content: str) -> None:
    with pytest.raises(UnparseableAnswer):
        parse_answer(content)


def test_reasoning_model_without_temperature_zero() -> None:
    script = JudgeScript(default="reject_temperature")
    verdict, calls = judge_once(script)
    assert verdict.error is None and verdict.score is not None and calls == 2
    assert script.bodies[0]["temperature"] == 0 and "temperature" not in script.bodies[1]


def test_other_client_errors_are_not_retried() -> None:
    script = JudgeScript(default="bad_model")
    verdict, calls = judge_once(script)  # asked once more without response_format (any 4xx), then it stands
    assert verdict.error == "HTTP 404: The model `judge-test` does not exist." and calls == 2
    verdict, calls = judge_once(JudgeScript(default="bad_model"), structured_output=False)
    assert verdict.error is not None and calls == 1


def test_every_call_is_bounded_by_max_tokens() -> None:
    script = JudgeScript()
    judge_once(script)
    assert script.bodies[0]["max_tokens"] == 512
    script = JudgeScript()
    judge_once(script, max_tokens=64)
    assert script.bodies[0]["max_tokens"] == 64


def test_a_4xx_in_any_words_drops_structured_output() -> None:
    """llama-server answers a schema it cannot turn into a grammar with a 400 about samplers."""
    script = JudgeScript(default="reject_samplers")
    verdict, calls = judge_once(script)
    assert verdict.error is None and verdict.score is not None and calls == 2
    assert "response_format" in script.bodies[0] and "response_format" not in script.bodies[1]
    assert script.bodies[1]["max_tokens"] == 512  # still bounded


def test_a_rate_limit_never_drops_structured_output() -> None:
    script = JudgeScript()
    script.script.append("429")
    verdict, _ = judge_once(script)
    assert verdict.error is None and all("response_format" in body for body in script.bodies)


def test_reasoning_model_gets_max_completion_tokens() -> None:
    script = JudgeScript(default="reject_max_tokens")
    verdict, calls = judge_once(script)
    assert verdict.error is None and calls == 2
    assert script.bodies[1]["max_completion_tokens"] == 512 and "max_tokens" not in script.bodies[1]
    assert "response_format" in script.bodies[1]  # the rejection named max_tokens, not the schema


def test_an_answer_cut_at_max_tokens_is_a_judge_error_that_says_so() -> None:
    verdict, calls = judge_once(JudgeScript(default="unfinished"))
    assert verdict.score is None and calls == 2
    assert verdict.error is not None and verdict.error.startswith("unparseable judge answer (cut at max_tokens 512)")
    assert verdict.cost_usd > 0
