"""The pure part: what a probe saw -> outcome and numbers."""

from __future__ import annotations

import re

import pytest

from monitor.canary.outcome import Observed, judge, outcome_of_status, tpot, ttft_gap

DONE = Observed(status=200, first_content_s=0.2, last_content_s=0.82, ended_s=0.83, content_chunks=20,
                text=" the simulated model", usage_tokens=32, finish_reason="length")


def test_a_complete_answer_is_ok_with_its_numbers() -> None:
    result = judge(DONE, re.compile("simulated"))
    assert result.outcome == "ok" and result.ok and result.detail == ""
    assert result.ttft_seconds == 0.2 and result.e2e_seconds == 0.83
    assert result.output_tokens == 32 and result.tokens_from == "usage"
    assert result.tpot_seconds == pytest.approx(0.62 / 31)  # usage counts tokens, not chunks


def test_without_usage_the_chunks_are_the_tokens() -> None:
    result = judge(Observed(**{**DONE.__dict__, "usage_tokens": None}))
    assert (result.output_tokens, result.tokens_from) == (20, "chunks")
    assert result.tpot_seconds == pytest.approx(0.62 / 19)


@pytest.mark.parametrize(("status", "outcome"), [(429, "rate_limited"), (401, "http_4xx"), (404, "http_4xx"),
                                                 (500, "http_5xx"), (503, "http_5xx"), (302, "bad_response")])
def test_status_outcomes(status: int, outcome: str) -> None:
    assert outcome_of_status(status) == outcome
    result = judge(Observed(status=status, failure="status", detail=f"HTTP {status}"))
    assert result.outcome == outcome and not result.ok and result.e2e_seconds is None


def test_a_broken_connection_is_a_broken_stream_once_the_answer_started() -> None:
    assert judge(Observed(failure="connection", detail="reset")).outcome == "connection_error"
    broken = judge(Observed(status=200, first_content_s=0.2, last_content_s=0.3, content_chunks=3,
                            failure="connection", detail="peer closed"))
    assert broken.outcome == "broken_stream"
    assert broken.ttft_seconds == 0.2 and broken.e2e_seconds is None  # what was measured stays


def test_a_stream_that_ends_without_finishing_is_broken() -> None:
    result = judge(Observed(**{**DONE.__dict__, "finish_reason": None}))
    assert result.outcome == "broken_stream" and "finish_reason" in result.detail


def test_empty_answer_and_expect() -> None:
    empty = Observed(status=200, ended_s=0.3, finish_reason="stop")
    assert judge(empty).outcome == "empty_answer"
    mismatch = judge(DONE, re.compile(r"\bParis\b"))
    assert mismatch.outcome == "expect_mismatch" and "Paris" in mismatch.detail
    assert mismatch.ttft_seconds == 0.2  # a wrong answer still took its time


def test_other_failures() -> None:
    assert judge(Observed(failure="refused")).outcome == "refused"
    assert judge(Observed(failure="timeout", status=200, first_content_s=0.5)).outcome == "timeout"
    assert judge(Observed(failure="invalid", detail="x" * 500)).detail == "x" * 160


def test_tpot_and_gap_edges() -> None:
    assert tpot(0.2, 0.2, 1) is None and tpot(None, 0.3, 5) is None
    assert tpot(0.2, 0.5, 4) == pytest.approx(0.1)
    assert ttft_gap(0.3, 0.175) == pytest.approx(0.125)
    assert ttft_gap(None, 0.175) is None and ttft_gap(0.3, None) is None


def test_describe_probe() -> None:
    from monitor.canary.outcome import describe_probe

    assert describe_probe(judge(DONE)) == "ok, TTFT 0.200 s, TPOT 0.020 s, 32 tokens"
    assert describe_probe(judge(Observed(failure="refused", detail="nobody"))) == "FAILED: refused (nobody)"
    assert describe_probe(None).startswith("FAILED: the prober itself failed")
