"""Fault schedule: pure evaluation, config parsing, and each kind's effect on the page."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from monitor.sim import (
    Fault,
    FaultEffects,
    FaultSchedule,
    LatencyProfile,
    LoadConfig,
    demo_schedule,
    parse_faults,
    run_load,
)
from monitor.sim.faults import FAULT_KINDS, combine_effects


def test_fault_window_is_half_open():
    fault = Fault(10.0, 5.0, "latency_spike", 4.0)
    assert [fault.active_at(t) for t in (9.99, 10.0, 14.99, 15.0)] == [False, True, True, False]


def test_overlapping_faults_compound():
    effects = combine_effects([
        Fault(0, 1, "latency_spike", 2.0), Fault(0, 1, "latency_spike", 3.0),
        Fault(0, 1, "error_burst", 0.5), Fault(0, 1, "error_burst", 0.5),
        Fault(0, 1, "throughput_drop", 4.0), Fault(0, 1, "kv_pressure", 0.1),
    ])  # fmt: skip
    assert effects == FaultEffects(6.0, 4.0, 0.75, 0.1)
    assert combine_effects([]) == FaultEffects()


def test_a_slow_decay_grows_with_the_faults_age():
    decay = Fault(3600.0, math.inf, "slow_decay", 0.04)
    schedule = FaultSchedule((decay,))
    assert schedule.effects(3600.0).prefill_mult == 1.0
    day3 = schedule.effects(3600.0 + 3 * 86400.0)
    assert day3.prefill_mult == pytest.approx(1.04 ** 3) and day3.per_token_mult == pytest.approx(1.04 ** 3)
    assert schedule.effects(3600.0 + 12 * 3600.0).prefill_mult == pytest.approx(1.04 ** 0.5)
    assert parse_faults([{"kind": "slow_decay"}])[0].magnitude == 0.04


def test_cycle_repeats_the_schedule():
    schedule = FaultSchedule((Fault(10, 5, "error_burst", 0.2),), cycle_s=60)
    assert schedule.effects(12).error_fraction == pytest.approx(0.2)
    assert schedule.effects(72).error_fraction == pytest.approx(0.2)
    assert schedule.effects(20).error_fraction == 0


def test_parse_faults_with_defaults_and_named_errors():
    faults = parse_faults([{"kind": "kv_pressure", "start_s": 5, "duration_s": 10},
                           {"kind": "error_burst", "magnitude": 0.1}])  # fmt: skip
    assert faults[0] == Fault(5.0, 10.0, "kv_pressure", 0.05)
    assert faults[1].duration_s == math.inf and faults[1].magnitude == 0.1
    with pytest.raises(ValueError, match=r"faults\[0\].kind"):
        parse_faults([{"kind": "meteor"}])
    with pytest.raises(ValueError, match=r"faults\[1\]: unknown keys \['magnitud'\]"):
        parse_faults([{"kind": "error_burst"}, {"kind": "error_burst", "magnitud": 1}])
    with pytest.raises(ValueError, match="fraction"):
        parse_faults([{"kind": "error_burst", "magnitude": 2}])


def test_demo_schedule_shows_every_kind_within_one_cycle():
    schedule = demo_schedule()
    assert schedule.cycle_s == 1800  # one slot per probable cause (tests/sim/test_demo_cycle.py)
    seen = {f.kind for t in range(1800) for f in schedule.active(t)}
    # the scorecard's, not the demo's (a prefix-cache drop needs an hour's baseline and a 15-min `for`;
    # a slow decay, days; the serving shapes' faults need a simulator with a KV tier, a P/D split or MoE)
    shapes = {"slow_kv_tier", "kv_tier_thrash", "pd_transfer_fail", "pd_transfer_slow", "moe_imbalance"}
    assert seen == set(FAULT_KINDS) - {"engine_unrecognised", "prefix_cache_loss", "slow_decay"} - shapes
    assert schedule.active(0) == () and schedule.active(1800) == ()


def _chat(url: str, stream: bool = False) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": "fault check"}], "stream": stream}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10.0)


def test_error_burst_fails_requests_with_500(start_sim, scrape):
    server = start_sim()
    server.sim.inject("error_burst", 1.0)
    responses = [_chat(server.url, stream=i % 2 == 0) for i in range(4)]
    assert {r.status_code for r in responses} == {500}
    assert responses[0].json()["error"]["type"] == "InternalServerError"
    page = scrape(server)
    assert page.value("vllm:request_success_total", finished_reason="error") == 4
    assert page.value("http_requests_total", status="5xx") == 4
    assert page.value("vllm:time_to_first_token_seconds_count") == 0


def test_latency_spike_moves_ttft_to_higher_buckets(start_sim, scrape):
    server = start_sim()
    for _ in range(3):
        _chat(server.url)
    fast = dict(scrape(server).buckets("vllm:time_to_first_token_seconds"))
    assert fast[0.04] == 3  # 5 ms prefill (+ scheduling slack on a busy machine)
    server.sim.inject("latency_spike", 50.0)  # 225-275 ms
    for _ in range(3):
        _chat(server.url)
    slow = dict(scrape(server).buckets("vllm:time_to_first_token_seconds"))
    assert slow[0.1] == fast[0.1]  # none of the new ones is fast
    assert slow[0.5] == 6


def test_prefix_cache_loss_finds_fewer_prompt_tokens(start_sim, scrape):
    server = start_sim()
    long_prompt = " ".join(f"word{i}" for i in range(400))  # whole blocks of it are found in the cache
    for _ in range(3):
        _chat_with(server.url, long_prompt)
    before = scrape(server)
    hits, queries = before.value("vllm:prefix_cache_hits_total"), before.value("vllm:prefix_cache_queries_total")
    assert 0.25 < hits / queries < 0.4  # the profile's 35 %, in whole 16-token blocks
    server.sim.inject("prefix_cache_loss", 0.2)
    for _ in range(3):
        _chat_with(server.url, long_prompt)
    after = scrape(server)
    found = after.value("vllm:prefix_cache_hits_total") - hits
    looked_up = after.value("vllm:prefix_cache_queries_total") - queries
    assert looked_up == queries  # the same prompts
    assert found / looked_up == pytest.approx(0.2 * hits / queries, abs=16 * 3 / looked_up)


def _chat_with(url: str, content: str) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 4}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10.0)
    response.raise_for_status()
    return response


def test_throughput_drop_slows_every_token(start_sim, scrape):
    server = start_sim()
    for _ in range(3):
        _chat(server.url)
    before = scrape(server)
    server.sim.inject("throughput_drop", 5.0)
    for _ in range(3):
        _chat(server.url)
    after = scrape(server)
    tpot = "vllm:request_time_per_output_token_seconds"
    slow_mean = (after.value(f"{tpot}_sum") - before.value(f"{tpot}_sum")) / 3
    assert before.mean(tpot) == pytest.approx(0.002, rel=0.15)
    assert slow_mean == pytest.approx(0.010, rel=0.15)


def test_kv_pressure_fills_the_cache_queues_and_preempts(start_sim, scrape):
    profile = LatencyProfile(prefill_s=0.005, prefill_per_token_s=0.0, per_token_s=0.003,
                             output_tokens=(40, 80), jitter=0.1)  # fmt: skip
    server = start_sim(profile, kv_cache_tokens=4096)
    # 512 of 4096 tokens left: a request holds 30-40 prompt + up to 80 output tokens, so
    # only a handful run at once, the rest wait, and growing ones push each other out.
    server.sim.inject("kv_pressure", 0.125)
    load = LoadConfig(rps=100, duration_s=0.3, prompt_words=(30, 40), max_tokens=None,
                      stream_share=0.0, drain_timeout_s=10)  # fmt: skip

    async def load_and_watch() -> list[tuple[float, float]]:
        task = asyncio.create_task(run_load(server.url, load))
        readings = []
        while not task.done():
            await asyncio.sleep(0.05)
            page = await asyncio.to_thread(scrape, server)
            readings.append((page.value("vllm:kv_cache_usage_perc"),
                             page.value("vllm:num_requests_waiting")))  # fmt: skip
        summary = await task
        assert summary.ok == summary.sent == 30
        return readings

    readings = asyncio.run(load_and_watch())
    assert max(usage for usage, _ in readings) > 0.8
    assert max(waiting for _, waiting in readings) > 0
    page = scrape(server)
    assert page.value("vllm:num_preemptions_total") > 0
    assert page.value("vllm:request_queue_time_seconds_sum") > 0.1
