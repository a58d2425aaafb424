"""The load generator: open loop, seeded, and always bounded in time."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

import pytest

from monitor.sim import LatencyProfile, LoadConfig, run_load
from monitor.sim.load import arrival_offsets, build_payload, quantile

SLOW = LatencyProfile(prefill_s=0.005, prefill_per_token_s=0.0, per_token_s=0.05,
                      output_tokens=(100, 100), jitter=0.0)  # fmt: skip


def test_uniform_arrivals_are_evenly_spaced_and_bounded():
    offsets = list(arrival_offsets(LoadConfig(rps=4, duration_s=1.0), random.Random(0)))
    assert offsets == pytest.approx([0.0, 0.25, 0.5, 0.75])


def test_poisson_arrivals_are_seeded():
    config = LoadConfig(rps=50, duration_s=20, arrival="poisson")
    first = list(arrival_offsets(config, random.Random(3)))
    assert first == list(arrival_offsets(config, random.Random(3)))
    assert len(first) == pytest.approx(1000, rel=0.1)
    assert all(0 <= t < 20 for t in first)


def test_payloads_follow_the_config():
    config = LoadConfig(stream_share=1.0, prompt_words=(3, 3), max_tokens=(7, 7), model="m")
    payload = build_payload(config, random.Random(0))
    assert payload == {"messages": [{"role": "user", "content": "word word word"}], "model": "m",
                       "max_tokens": 7, "stream": True,
                       "stream_options": {"include_usage": True}}  # fmt: skip
    plain = build_payload(LoadConfig(endpoint="completions", stream_share=0.0, max_tokens=None),
                          random.Random(0))  # fmt: skip
    assert set(plain) == {"prompt"}


def test_quantile_is_nearest_rank():
    assert quantile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert quantile([3.0, 1.0, 2.0, 4.0], 0.99) == 4.0
    assert quantile([], 0.5) != quantile([], 0.5)  # NaN


def test_load_stops_at_its_duration_and_counts_everything(start_sim, scrape):
    server = start_sim()
    config = LoadConfig(rps=20, duration_s=1.0, max_tokens=(4, 12), stream_share=0.5)
    started = time.monotonic()
    summary = asyncio.run(run_load(server.url, config))
    assert time.monotonic() - started < 2.0
    assert summary.sent == summary.ok == 20 and summary.errors == summary.skipped == 0
    assert summary.status_counts == {200: 20}
    assert len(summary.latencies_s) == 20 and 0 < len(summary.ttfts_s) < 20
    page = scrape(server)
    assert page.value("vllm:request_success_total") == 20
    assert page.value("vllm:generation_tokens_total") == summary.completion_tokens
    assert page.value("vllm:prompt_tokens_total") == summary.prompt_tokens


def test_drain_timeout_cancels_slow_requests_and_the_server_sees_aborts(start_sim, scrape):
    server = start_sim(SLOW)  # 5 s per request
    config = LoadConfig(rps=10, duration_s=0.3, drain_timeout_s=0.3, stream_share=0.5,
                        max_tokens=None)  # fmt: skip
    started = time.monotonic()
    summary = asyncio.run(run_load(server.url, config))
    assert time.monotonic() - started < 1.5
    assert summary.cancelled == summary.sent == 3 and summary.ok == 0
    deadline = time.monotonic() + 3
    while scrape(server).value("vllm:request_success_total", finished_reason="abort") < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_concurrency_cap_skips_arrivals(start_sim):
    server = start_sim(SLOW)
    config = LoadConfig(rps=20, duration_s=0.25, max_concurrency=1, drain_timeout_s=0.1)
    summary = asyncio.run(run_load(server.url, config))
    assert (summary.sent, summary.skipped, summary.cancelled) == (1, 4, 1)


def test_errors_are_counted_by_status(start_sim):
    server = start_sim()
    server.sim.inject("error_burst", 1.0)
    summary = asyncio.run(run_load(server.url, LoadConfig(rps=20, duration_s=0.2)))
    assert summary.errors == summary.sent == 4 and summary.ok == 0
    assert summary.status_counts == {500: 4}


def test_uniform_arrivals_do_not_drift_into_an_extra_request():
    offsets = list(arrival_offsets(LoadConfig(rps=5, duration_s=2.0), random.Random(0)))
    assert len(offsets) == 10
    assert len(list(arrival_offsets(LoadConfig(rps=3, duration_s=0.5), random.Random(0)))) == 2



async def cancel_once_running(server, load: LoadConfig, running: int) -> set[asyncio.Task[object]]:
    """Start `load`, cancel it once `running` of its requests run in the simulator; the tasks left."""
    task = asyncio.create_task(run_load(server.url, load))
    deadline = time.monotonic() + 10
    while len(server.sim.running) < running:
        assert time.monotonic() < deadline, "the requests did not reach the simulator"
        await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


def test_a_cancelled_load_ends_its_requests_in_flight(start_sim) -> None:
    """Cancelled from outside (a test switching loads), run_load ends the requests in flight before
    its client closes. Left running, they finished on the closed client's pool, which never closed
    their connections: unclosed sockets that a later test's garbage collection reported as an
    unraisable ResourceWarning (tests/alerting/test_context_sim.py[traffic_drop], #17 item 8)."""
    server = start_sim(SLOW)
    load = LoadConfig(rps=40, duration_s=30, max_tokens=None)  # cancelled while it still sends
    assert asyncio.run(cancel_once_running(server, load, 3)) == set()


def test_a_load_cancelled_while_it_drains_ends_its_requests_in_flight(start_sim) -> None:
    """The same, cancelled after its last arrival, while it waits for the requests in flight (the
    demo's and the scorecard's slices spend most of their life there): the wait was cancelled, the
    requests ran on, and the client closed under them (the scorecard leaked 3 sockets so, #17 item 8)."""
    server = start_sim(SLOW)
    load = LoadConfig(rps=20, duration_s=0.2, max_tokens=None, drain_timeout_s=60.0)  # 4 arrivals
    assert asyncio.run(cancel_once_running(server, load, 4)) == set()  # all 4 running: it drains
