"""A real llama.cpp llama-server (tests/support/llamacpp.py): the engine table, the canary and the judge against it.

The server runs a tiny random-weight model made by the test, with a fixed sampling seed; its
`/metrics` page and its OpenAI-compatible API are llama.cpp's own code. What the monitor reads
must agree with what the server told each client (`usage`, `timings`).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.canary.outcome import Observed
from monitor.canary.outcome import judge as judge_probe
from monitor.canary.probe import Prober
from monitor.config import CanaryProbe, JudgeSettings, load_settings
from monitor.quality.judge import Judge, JudgeInput
from monitor.quality.store import Verdict
from monitor.runtime import Monitor
from tests.support.llamacpp import MODEL_NAME, LlamaServer, serve_tiny_model

WINDOW, ELAPSED = "61s", 60.0  # see test_table_reads_the_live_page: rate() is then the plain delta / 60 s
T0 = 1_767_300_000.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    yield from serve_tiny_model(tmp_path_factory, "llama")


def chat(server: LlamaServer, content: str, max_tokens: int = 24) -> dict[str, object]:
    answer = httpx.post(f"{server.url}/v1/chat/completions", timeout=60, json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens})
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


def counters(server: LlamaServer) -> dict[str, float]:
    return {s.name: s.value for fam in text_string_to_metric_families(server.metrics()) for s in fam.samples}


def test_table_reads_the_live_page(server: LlamaServer) -> None:
    """Scrape, serve known requests, scrape again a (simulated) minute later: the numbers are the
    requests' own usage and timings. Prompts share a prefix, so the slot's cache is used."""
    # Every counter starts above 0 (the cached-token one needs a second prompt with the same prefix):
    # Prometheus extrapolates a counter back no further than to where it would have been 0.
    chat(server, "warm up the slot with a prompt")
    chat(server, "warm up the slot with a prompt, again")
    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "alerting": {"enabled": False},
                                    "service": {"windows": [WINDOW], "scrape_interval": "60s", "targets": [
                                        {"name": "edge", "url": f"{server.url}/metrics", "model": MODEL_NAME}]}})
    clock = [T0]
    answers: list[dict[str, object]] = []

    pages: list[dict[str, float]] = []

    async def run() -> str:
        monitor = Monitor(settings, wall=lambda: clock[0])
        await monitor.run_once()
        pages.append(counters(server))  # what the monitor just read (reading changes no counter)
        for n in range(3):
            answers.append(await asyncio.to_thread(chat, server, f"warm up the slot with a prompt, then {n}"))
        clock[0] += ELAPSED
        await monitor.run_once()
        pages.append(counters(server))
        text = monitor.metrics_text().decode()
        await monitor.aclose()
        return text

    text = asyncio.run(run())
    got = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
           if dict(s.labels).get("target") == "edge" and dict(s.labels).get("window") in (WINDOW, None)}
    usage = [a["usage"] for a in answers]
    timings = [a["timings"] for a in answers]
    prompt = sum(u["prompt_tokens"] for u in usage)  # type: ignore[index]
    generated = sum(u["completion_tokens"] for u in usage)  # type: ignore[index]
    cached = sum(t["cache_n"] for t in timings)  # type: ignore[index]
    computed = sum(t["prompt_n"] for t in timings)  # type: ignore[index]
    assert cached > 0 and computed + cached == prompt
    # Window 61 s over samples 60 s apart: extrapolated back by 1 s, rate = increase / 60 s.
    assert got["inference_prompt_tokens_per_second"] * ELAPSED == pytest.approx(prompt)
    assert got["inference_generation_tokens_per_second"] * ELAPSED == pytest.approx(generated)
    assert got["inference_prefix_cache_hit_ratio"] == pytest.approx(cached / prompt)
    def delta(name: str) -> float:
        return pages[1][f"llamacpp:{name}"] - pages[0][f"llamacpp:{name}"]

    assert delta("tokens_predicted_total") == generated and delta("prompt_tokens_total") == computed
    assert got["inference_generation_seconds_per_token"] == pytest.approx(
        delta("tokens_predicted_seconds_total") / generated)
    assert got["inference_prompt_seconds_per_token"] == pytest.approx(delta("prompt_seconds_total") / computed)
    # The busy-time counters and each answer's own timings are taken at slightly different moments.
    predicted_s = sum(t["predicted_ms"] for t in timings) / 1000  # type: ignore[index]
    assert got["inference_generation_seconds_per_token"] == pytest.approx(predicted_s / generated, rel=0.25)
    assert got["inference_requests_running"] == 0 and got["inference_requests_waiting"] == 0
    assert "inference_requests_per_second" not in got and "inference_request_error_ratio" not in got
    assert got["inference_target_up"] == 1.0


def test_canary_ttft_is_the_engines_prompt_time_plus_overhead(server: LlamaServer) -> None:
    probe = CanaryProbe(name="edge", base_url=f"{server.url}/v1", model=MODEL_NAME, max_tokens=16)
    before = counters(server)

    async def run() -> Observed:
        prober = Prober(probe, user="infermon-canary")
        try:
            return await prober.run()
        finally:
            await prober.aclose()

    result = judge_probe(asyncio.run(run()))
    after = counters(server)
    assert result.ok, result.detail
    engine_prompt_s = after["llamacpp:prompt_seconds_total"] - before["llamacpp:prompt_seconds_total"]
    generated = after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert result.ttft_seconds is not None and result.tpot_seconds is not None
    # The client waits for the prompt to be processed, plus HTTP, the SDK and the first decode step
    # (milliseconds here; the bound leaves room for a loaded test machine).
    assert result.e2e_seconds is not None
    assert engine_prompt_s <= result.ttft_seconds <= min(result.e2e_seconds, engine_prompt_s + 5.0)
    # The prompt starts with a fresh nonce, so the random model may stop before max_tokens.
    assert result.output_tokens == generated and 0 < generated <= 16 and result.tokens_from == "usage"


def test_judge_counts_an_unfinished_structured_answer_as_a_judge_error(server: LlamaServer) -> None:
    """The random model follows the JSON schema's grammar but stops at the judge's token bound
    (max_tokens 16) long before the object closes: a judge error with its cause, no score, no crash."""
    settings = JudgeSettings(base_url=f"{server.url}/v1", model=MODEL_NAME, max_retries=2, timeout="30s",
                             max_tokens=16)

    async def run() -> tuple[Verdict, bool, int]:
        judge = Judge(settings, api_key="unused", backoff_s=0.0)
        try:
            verdict = await judge.judge(JudgeInput(prompt="What is 2 + 2?", response="4"))
            return verdict, judge.structured, judge.calls
        finally:
            await judge.aclose()

    verdict, structured, calls = asyncio.run(run())
    assert verdict.score is None and verdict.error and "unparseable" in verdict.error
    assert structured  # llama-server took the json_schema (add_space_prefix false): no fallback
    assert calls == 2  # temperature 0: one retry of an unparseable answer, then given up
    assert verdict.output_tokens == 2 * 16


def test_check_names_what_the_engine_leaves_out_and_the_latency_source(server: LlamaServer, tmp_path: Path) -> None:
    """`infermon check` (a real process) against the live server, with a canary through its API.
    The probe's prompt has no nonce: with the server's fixed seed its answer is the same every
    run. With a fresh nonce the random model's first token was its end of turn in one run (an
    `empty_answer`, and `check` failed, beside two CPU hogs)."""
    config = tmp_path / "edge.yaml"
    config.write_text(
        "infra: {nvml: {enabled: 'false'}}\nalerting: {enabled: false}\n"
        f"service:\n  targets: [{{name: edge, url: '{server.url}/metrics', model: {MODEL_NAME}}}]\n"
        "canary:\n  probes:\n"
        f"    - {{name: edge, base_url: '{server.url}/v1', model: {MODEL_NAME}, target: edge, max_tokens: 8,"
        " nonce: false}\n")
    result = subprocess.run([sys.executable, "-m", "monitor.cli", "check", "--config", str(config)],
                            capture_output=True, text=True, timeout=120, check=False,
                            env={**os.environ, "INFERMON_STORAGE__URL": "sqlite://"})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    (up,) = [i for i, line in enumerate(lines) if line.startswith("  edge ")]
    assert lines[up].endswith("up, llamacpp server")
    note = lines[up + 1].strip()
    assert "not on the engine's page: request count, error ratio, TTFT quantiles" in note
    assert "the canary (client-side TTFT/TPOT) is this target's latency source" in note
    assert any(line.startswith("  canary edge") and " ok, TTFT " in line for line in lines)


def test_a_missing_build_fails_under_ci_and_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.support.llamacpp as llamacpp

    monkeypatch.delenv("LLAMA_SERVER", raising=False)
    monkeypatch.setattr(llamacpp, "_cached_binary", lambda: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="not built"):
        llamacpp.llama_server_binary()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="not built"):
        llamacpp.llama_server_binary()
