"""The judge is bounded in bytes and time (#48 item 4), through the real `openai` SDK against a
loopback judge that misbehaves: it drips a byte at a time, sends tens of MiB (chunked, with a
Content-Length, or as a gzip bomb), answers 200 with text or HTML, or reports absurd usage.

Every test waits under an outer deadline (`within`), so a judge client that never stops fails
the test instead of hanging it."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from monitor.config import JudgeSettings, Settings
from monitor.quality.judge import Judge, JudgeInput, build_prompt
from monitor.quality.run import QualityRunner, RunReport
from monitor.quality.sources.requestlog import RequestLogSource
from monitor.quality.store import QualityStore, Verdict
from monitor.store.session import Store
from tests.quality.helpers import DAY, make_samples, quality_settings
from tests.quality.judgeserver import JudgeScript, judge_server

ITEM = JudgeInput(prompt="What is the capital of France?", response="The capital of France is Paris, on the Seine.")
KEY = "sk-test-do-not-leak-0123456789abcdef"
OUTER_S = 15.0  # far above what a bounded judge takes here; what an unbounded one never meets

PRICES = {"usd_per_million_input_tokens": 1.25, "usd_per_million_output_tokens": 10.0}  # a hosted judge's


def judge_within(script: JudgeScript, **settings: Any) -> tuple[Verdict, int, float]:
    """(verdict, HTTP calls, seconds) of one judgement, failing the test past OUTER_S."""
    with judge_server(script) as url:
        config = JudgeSettings(base_url=url, model="judge-test", **{**PRICES, **settings})

        async def run() -> tuple[Verdict, int, float]:
            judge = Judge(config, KEY, backoff_s=0.01)
            started = time.monotonic()
            try:
                verdict = await asyncio.wait_for(judge.judge(ITEM), OUTER_S)
                return verdict, judge.calls, time.monotonic() - started
            finally:
                await judge.aclose()

        return asyncio.run(run())


def run_within(settings: Settings) -> RunReport:
    store = Store(settings.storage.url)
    try:
        quality = QualityStore(store.engine)
        runner = QualityRunner(settings.quality, quality, [RequestLogSource(quality)])
        return asyncio.run(asyncio.wait_for(runner.run(DAY), OUTER_S))
    finally:
        store.close()


def seeded(tmp_path: Path, url: str, samples: int, **judge: Any) -> Settings:
    settings = quality_settings(tmp_path, url, sample_size=samples, judge={
        "base_url": url, "model": "judge-test", "concurrency": 1, "timeout": "0.5s", "max_retries": 1, **judge})
    store = Store(settings.storage.url)
    QualityStore(store.engine).add_samples(make_samples(samples))
    store.close()
    return settings


def test_a_judge_dripping_bytes_ends_at_the_deadline() -> None:
    """Each byte comes well inside the per-read timeout: only a deadline on the whole call ends it."""
    script = JudgeScript(default="drip")
    verdict, calls, seconds = judge_within(script, timeout="0.4s", max_retries=1)
    assert verdict.score is None and verdict.error == "timed out after 0.4s"
    assert calls == 2 and seconds < 4.0  # two attempts of 0.4 s and a backoff of 10 ms


def test_a_run_against_a_dripping_judge_ends(tmp_path: Path) -> None:
    with judge_server(JudgeScript(default="drip")) as url:
        report = run_within(seeded(tmp_path, url, 3, concurrency=3, max_retries=0))
    (outcome,) = report.outcomes
    assert outcome.judge_errors == 3 and outcome.failed is not None


@pytest.mark.parametrize("behaviour", ["huge", "huge_length"])
def test_a_huge_answer_is_one_judge_error(behaviour: str) -> None:
    """48 MiB of a valid answer that claims 10^12 completion tokens: refused past the cap, not read
    whole, not retried, and nothing is charged for what was not read."""
    script = JudgeScript(default=behaviour)
    script.usage = {"prompt_tokens": 1000, "completion_tokens": 10**12, "total_tokens": 10**12 + 1000}
    verdict, calls, _ = judge_within(script, timeout="10s")
    assert verdict.score is None and calls == 1
    assert verdict.error is not None and verdict.error.startswith("answer larger than 1 MiB")
    assert verdict.output_tokens == 0 and verdict.cost_usd == 0


def test_a_gzip_bomb_is_refused_unread() -> None:
    """The client asks for no encoding; an answer encoded anyway would be decoded past any cap."""
    script = JudgeScript(default="gzip_bomb")
    script.huge_bytes = 16 * 2**20
    verdict, calls, _ = judge_within(script, timeout="10s")
    assert script.headers[0]["accept-encoding"] == "identity"
    assert verdict.score is None and calls == 1
    assert verdict.error == "answer in Content-Encoding gzip (identity was asked for): not read"


@pytest.mark.parametrize(("behaviour", "detail"), [
    ("text_plain", "(text/plain): 'OK'"),
    ("html", "(text/html): '<html><body><h1>Welcome to nginx!</h1></body></html>'"),
    ("not_json", "(application/json): 'upstream said OK'"),
    ("wrong_shape", "(application/json): no choices[0].message"),
])
def test_an_answer_that_is_no_chat_completion_is_one_judge_error(behaviour: str, detail: str) -> None:
    verdict, calls, _ = judge_within(JudgeScript(default=behaviour))
    assert verdict.score is None and calls == 2  # asked once more, as for any unparseable answer
    assert verdict.error == f"unparseable judge answer: not a chat completion {detail}"


def test_a_text_answer_is_a_judge_error_not_a_crashed_run(tmp_path: Path) -> None:
    """The issue's run: one `200 text/plain` ended the whole run with an AttributeError."""
    script = JudgeScript()
    script.script.extend(["text_plain", "text_plain"])  # the first sample, asked twice
    with judge_server(script) as url:
        report = run_within(seeded(tmp_path, url, 9))
    (outcome,) = report.outcomes
    assert outcome.ok and outcome.judged_now == 9 and outcome.judge_errors == 1
    store = Store(f"sqlite:///{tmp_path / 'quality.db'}")
    try:
        quality = QualityStore(store.engine)
        run = quality.run(DAY, "qwen3-8b")
        assert run is not None
        errors = [row.error for row in quality.judgments(run.id) if row.error]
    finally:
        store.close()
    assert errors == ["unparseable judge answer: not a chat completion (text/plain): 'OK'"]


@pytest.mark.parametrize("padding", [0, 80])  # 80: the key straddles the end of the 120-byte excerpt
def test_the_api_key_never_appears_in_a_judge_error(padding: int, caplog: pytest.LogCaptureFixture) -> None:
    """A gateway that echoes the request's headers: the error keeps what it said, not the key."""
    caplog.set_level(logging.DEBUG)
    script = JudgeScript(default="echo_auth")
    script.echo_padding = "." * padding
    verdict, _, _ = judge_within(script)
    assert verdict.error is not None and "Bearer <secret>" in verdict.error
    assert KEY[:8] not in verdict.error and KEY[:8] not in caplog.text


PROMPT_BOUND = len(build_prompt(ITEM).encode()) + 1024  # bytes of the prompt, plus a chat template's tokens


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 1000, "completion_tokens": 10**12}, (1000, 512)),  # past max_tokens: max_tokens
    ({"prompt_tokens": 10**9, "completion_tokens": 50}, (PROMPT_BOUND, 50)),  # past the prompt's size
    ({"prompt_tokens": -5, "completion_tokens": -1}, (0, 0)),
    ({"prompt_tokens": "1000", "completion_tokens": 50.5}, (0, 0)),
    ({"prompt_tokens": True, "completion_tokens": None}, (0, 0)),
    ({"prompt_tokens": 1000.0, "completion_tokens": 50}, (1000, 50)),  # an integral float is a count
])
def test_absurd_usage_is_capped_in_the_cost(usage: dict[str, Any], expected: tuple[int, int],
                                            caplog: pytest.LogCaptureFixture) -> None:
    script = JudgeScript()
    script.usage = usage
    verdict, _, _ = judge_within(script)
    assert verdict.error is None and verdict.score is not None  # usage is the cost's, not the verdict's
    assert (verdict.input_tokens, verdict.output_tokens) == expected
    assert verdict.cost_usd == pytest.approx((expected[0] * 1.25 + expected[1] * 10.0) / 1e6)
    if expected != (1000, 50):
        assert "reported usage" in caplog.text
