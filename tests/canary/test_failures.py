"""Each way a user's request can fail, on real loopback servers through the real SDK: the probe
is `up 0` with the right outcome, counted, and says so in exactly one log line (no traceback,
nothing from the SDK or the transport above INFO)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from monitor.canary.outcome import OUTCOMES
from monitor.sim import SimServer
from tests.canary.conftest import MODEL, canary_monitor, probe, samples
from tests.support.forwarder import Forwarder
from tests.support.pageserver import Page, PageServer

Setup = Callable[[SimServer, PageServer], Iterator[tuple[str, dict[str, str]]]]


@contextmanager
def cut_mid_answer(sim: SimServer, pages: PageServer) -> Iterator[tuple[str, dict[str, str]]]:
    with Forwarder(sim.port, cut_after_events=4) as path:  # role chunk + 3 content chunks, then gone
        yield f"http://127.0.0.1:{path.port}/v1", {}


@contextmanager
def rate_limited(sim: SimServer, pages: PageServer) -> Iterator[tuple[str, dict[str, str]]]:
    body = json.dumps({"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": 429}})
    pages.set("/v1/chat/completions", Page(body, status=429, content_type="application/json"))
    yield pages.url("/v1"), {}


@contextmanager
def server_error(sim: SimServer, pages: PageServer) -> Iterator[tuple[str, dict[str, str]]]:
    sim.sim.inject("error_burst", 1.0)  # the simulator answers 500, as vLLM does on an engine error
    yield f"{sim.url}/v1", {}


@contextmanager
def hang(sim: SimServer, pages: PageServer) -> Iterator[tuple[str, dict[str, str]]]:
    sim.sim.inject("latency_spike", 1000.0)  # the first token would come after 200 s
    yield f"{sim.url}/v1", {"timeout": "1s"}


@contextmanager
def wrong_answer(sim: SimServer, pages: PageServer) -> Iterator[tuple[str, dict[str, str]]]:
    yield f"{sim.url}/v1", {"expect": r"\bParis\b"}


@contextmanager
def refused(sim: SimServer, pages: PageServer) -> Iterator[tuple[str, dict[str, str]]]:
    yield pages.refused_url("/v1"), {}


@contextmanager
def unknown_model(sim: SimServer, pages: PageServer) -> Iterator[tuple[str, dict[str, str]]]:
    yield f"{sim.url}/v1", {"model": "no-such-model"}


CASES: dict[str, tuple[Setup, str, str]] = {
    # name: (setup, outcome, what the log line says)
    "stream cut mid-answer": (cut_mid_answer, "broken_stream", "broken_stream"),
    "429": (rate_limited, "rate_limited", "HTTP 429: Rate limit reached"),
    "500": (server_error, "http_5xx", "HTTP 500"),
    "hang past the timeout": (hang, "timeout", "no complete answer within 1s"),
    "answer fails expect": (wrong_answer, "expect_mismatch", "does not match /\\bParis\\b/"),
    "refused": (refused, "refused", "refused"),
    "unknown model": (unknown_model, "http_4xx", "HTTP 404"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_failure_is_up_0_with_its_outcome_and_one_log_line(
    case: str, start_sim, caplog: pytest.LogCaptureFixture
) -> None:
    setup, outcome, said = CASES[case]
    sim = start_sim()
    with PageServer() as pages, setup(sim, pages) as (base_url, extra):
        model = extra.pop("model", MODEL)
        monitor = canary_monitor([probe("p", base_url, model=model, **extra)])

        async def run() -> bytes:
            try:
                result = await monitor.canary.probe_once("p")
                assert result is not None and result.outcome == outcome, result
                return monitor.metrics_text()
            finally:
                await monitor.aclose()

        with caplog.at_level(logging.INFO):
            page = asyncio.run(run())
    labels = (("model", model), ("probe", "p"))
    exported = samples(page)
    assert exported[("inference_canary_up", labels)] == 0.0
    assert exported[("inference_canary_consecutive_failures", labels)] == 1.0
    counts = {o: exported[("inference_canary_probes_total", (*labels[:1], ("outcome", o), labels[1]))]
              for o in OUTCOMES}
    assert counts == {o: float(o == outcome) for o in OUTCOMES}
    ours = [r for r in caplog.records if r.name.startswith("monitor")]
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(ours) == 1 and loud == ours, [r.getMessage() for r in caplog.records]
    line = ours[0].getMessage()
    assert line.startswith(f"canary p failed: {outcome} (") and said in line, line
    assert ours[0].exc_info is None
    # The health of the canary itself is fine: it probed and recorded a result.
    assert exported[("inference_monitor_collector_success", (("collector", "canary"), ("target", "p")))] == 1.0


def test_a_long_outage_logs_once_and_recovery_once(start_sim, caplog: pytest.LogCaptureFixture) -> None:
    sim = start_sim()
    monitor = canary_monitor([probe("p", f"{sim.url}/v1")])

    async def run() -> list[str]:
        try:
            sim.sim.inject("error_burst", 1.0)
            outcomes = [await monitor.canary.probe_once("p") for _ in range(4)]
            sim.sim.clear_injected()
            outcomes.append(await monitor.canary.probe_once("p"))
            return [r.outcome for r in outcomes if r is not None]
        finally:
            await monitor.aclose()

    with caplog.at_level(logging.INFO, logger="monitor"):
        outcomes = asyncio.run(run())
    assert outcomes == ["http_5xx"] * 4 + ["ok"]
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("monitor")]
    assert len(lines) == 2, lines
    assert lines[0].startswith("canary p failed: http_5xx")
    assert lines[1] == "canary p is ok again after 4 failed probes"
