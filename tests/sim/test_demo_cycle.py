"""The demo's cause cycle: the engine_down fault, the replayed GPU held where each slot says,
the traffic dip, and the demo's rule files (the shipped ones, on the 1m window with short `for`)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from monitor.config import SHIPPED_RULE_FILES, load_settings
from monitor.infra.replay import ReplayNvml, load_trace
from monitor.rulefiles.rules import load_rules
from monitor.sim import EngineConfig, SimulatedEngine
from monitor.sim.demo_cycle import CYCLE_ALERTS, DEMO_FOR_S, PER_RUN_GROUPS, HeldReplayClock, demo_rules
from monitor.sim.faults import DEMO_SLOT_S, demo_schedule

TRACE = Path(__file__).parents[2] / "monitor" / "data" / "nvml_h200_trace.json"


def test_engine_down_answers_503_everywhere_until_it_ends(start_sim) -> None:
    server = start_sim()
    server.sim.inject("engine_down", 1.0)
    assert httpx.get(server.metrics_url, timeout=5).status_code == 503
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 503
    chat = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]},
                      timeout=5)
    assert chat.status_code == 503 and chat.json()["error"]["type"] == "ServiceUnavailableError"
    server.sim.clear_injected()
    assert httpx.get(server.metrics_url, timeout=5).status_code == 200


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# slot -> what the replayed H200 shows during it (utilization %, memory ratio at least, sw_power_cap)
GPU_IN_SLOT = {1: (99, 0.0, True), 3: (99, 0.0, True), 5: (99, 0.9, True), 7: (0, 0.0, False)}


@pytest.mark.parametrize("slot", sorted(GPU_IN_SLOT))
def test_replayed_gpu_is_held_where_the_slot_says(slot: int) -> None:
    clock = Clock()
    sim = SimulatedEngine(faults=demo_schedule(), clock=clock)
    trace = load_trace(TRACE)
    replay = ReplayNvml(trace, HeldReplayClock(sim, trace.period, clock))
    replay.nvmlInit()
    cycle = demo_schedule().cycle_s or 0.0
    for second, loops in ((5.0, 0), (45.0, 1), (85.0, 3)):  # through the 90-s fault, later cycles too
        clock.now = loops * cycle + slot * DEMO_SLOT_S + second
        record, _ = replay.record()
        util, memory, capped = GPU_IN_SLOT[slot]
        assert record["util_gpu"] >= util if util else record["util_gpu"] == 0
        assert record["mem_used"] / record["mem_total"] >= memory
        assert bool(int(record["throttle"]) & 0x4) is capped
    assert sim.effects(slot * DEMO_SLOT_S + 120.0).gpu_hold_s is None  # after it: the GPU follows the load


def test_replayed_gpu_follows_the_engine_between_faults() -> None:
    """Idle when the engine has nothing to do, the 30 % duty part while it serves, the burn while
    requests wait; the energy counter never runs backwards across the switches."""
    clock = Clock()
    sim = SimulatedEngine(EngineConfig(max_num_seqs=1), clock=clock)
    trace = load_trace(TRACE)
    replay = ReplayNvml(trace, HeldReplayClock(sim, trace.period, clock))
    replay.nvmlInit()
    energy = [replay.nvmlDeviceGetTotalEnergyConsumption(0)]

    def at(second: float) -> dict[str, float]:
        clock.now = second
        energy.append(replay.nvmlDeviceGetTotalEnergyConsumption(0))
        return replay.record()[0]

    assert at(100.0)["util_gpu"] == 0
    sim.submit(20, 10)
    sim.step(clock.now)
    assert sim.running and not sim.waiting
    assert 25 <= at(130.0)["util_gpu"] <= 35
    assert 25 <= at(203.0)["util_gpu"] <= 35  # the next loop of the recording: still the duty part
    sim.submit(20, 10)
    assert 25 <= at(250.0)["util_gpu"] <= 35  # one arrival waits for the next step: not a queue yet
    sim.submit(20, 10)
    sim.submit(20, 10)
    assert len(sim.waiting) == 3
    assert at(260.0)["util_gpu"] >= 99 and int(at(261.0)["throttle"]) & 0x4
    sim.waiting.clear()
    sim.running.clear()
    assert 25 <= at(262.0)["util_gpu"] <= 35  # ran a request 2 s ago: between requests, not idle
    assert at(300.0)["util_gpu"] == 0
    assert energy == sorted(energy)


def test_traffic_dip_and_engine_down_slots() -> None:
    schedule = demo_schedule()
    dip = schedule.effects(8 * DEMO_SLOT_S + 120.0)
    assert dip.traffic_mult == pytest.approx(0.2) and not dip.down
    assert schedule.effects(6 * DEMO_SLOT_S + 45.0).down
    assert schedule.effects(6 * DEMO_SLOT_S + 100.0).down is False
    assert schedule.effects(100.0).traffic_mult == 1.0 and schedule.effects(100.0).gpu_hold_s is None


def test_demo_rules_are_the_shipped_rules_on_the_short_window(tmp_path: Path) -> None:
    paths = demo_rules(tmp_path)
    shipped = load_rules(load_settings(None).alerting.rules_files)
    demo = load_rules(paths, shipped=True)  # strict: every rule still inside the embedded subset
    assert [r.name for r in demo.rules] == [r.name for r in shipped.rules]
    for path in paths:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                assert 'window="5m"' not in str(rule.get("expr"))
    assert {p.stem for p in paths} == set(SHIPPED_RULE_FILES)
    by_name = {r.name: r for r in demo.rules}
    for rule in shipped.rules:
        if rule.name in CYCLE_ALERTS:  # the cycle's 90-s faults outlast `for`; resolved before the next slot
            assert by_name[rule.name].for_seconds == min(rule.for_seconds, DEMO_FOR_S)
            assert 0 < by_name[rule.name].keep_firing_for_seconds <= 15
        elif rule.trend:  # a trend rule keeps its own hysteresis (hours: alerts/trend.yml), if it has one
            assert by_name[rule.name].keep_firing_for_seconds == (rule.keep_firing_for_seconds or 300)
        elif rule.group in PER_RUN_GROUPS:  # one number a run: the shipped rule, no hold
            assert (by_name[rule.name].for_seconds, by_name[rule.name].keep_firing_for_seconds) == (
                rule.for_seconds, rule.keep_firing_for_seconds)
        else:  # hysteresis: the shipped `for`, and held a while, so GPU and cost alerts do not flap
            assert by_name[rule.name].for_seconds == rule.for_seconds
            assert by_name[rule.name].keep_firing_for_seconds == 300
    assert by_name["GPUPowerHigh"].for_seconds == 600 and by_name["CostIdleSpendHigh"].for_seconds == 1800
    # The scorecard (one fault per run) holds the cycle's alerts a whole window; the rest as the demo.
    held = {r.name: r for r in load_rules(demo_rules(tmp_path / "held", cycle_keep_firing="1m",
                                                     cycle_for={"ThroughputDrop": "2m"}), shipped=True).rules}
    assert {n for n, r in held.items() if r.keep_firing_for_seconds == 60} == set(CYCLE_ALERTS)
    assert held["ThroughputDrop"].for_seconds == 120  # its own `for`; the other cycle alerts the demo's
    assert all(held[n].for_seconds == by_name[n].for_seconds for n in CYCLE_ALERTS - {"ThroughputDrop"})
    assert all(r.keep_firing_for_seconds == by_name[n].keep_firing_for_seconds
               for n, r in held.items() if n not in CYCLE_ALERTS)
    ttft = by_name["TTFTP99High"]
    assert ttft.for_seconds == DEMO_FOR_S and 'window="1m"' in ttft.expr_text
