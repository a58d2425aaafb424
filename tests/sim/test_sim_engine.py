"""The engine and scheduler driven step by step on a fake clock: no sockets, no sleeping."""

from __future__ import annotations

import dataclasses

import pytest

from monitor.sim import EngineConfig, LatencyProfile, SimulatedEngine
from monitor.sim.stats import FinishedRequestStats, IterationStats

# Round numbers so every timestamp below can be checked by hand.
EXACT = LatencyProfile(prefill_s=0.1, prefill_per_token_s=0.001, per_token_s=0.01,
                       output_tokens=(10, 10), jitter=0.0, prefix_hit_ratio=0.0)  # fmt: skip


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _engine(profile: LatencyProfile = EXACT, **config: object) -> tuple[SimulatedEngine, FakeClock,
                                                                       list[IterationStats]]:
    clock = FakeClock()
    engine = SimulatedEngine(EngineConfig(deterministic=True, **config), profile,  # type: ignore[arg-type]
                             clock=clock)  # fmt: skip
    steps: list[IterationStats] = []
    engine.add_observer(steps.append)
    return engine, clock, steps


def _run_until_idle(engine: SimulatedEngine, clock: FakeClock, limit_s: float = 60.0) -> None:
    """Jump the clock from event to event, as the real loop does."""
    engine.step(clock.t)
    while (next_time := engine.scheduler.next_event_time()) is not None:
        clock.t = next_time
        assert clock.t < limit_s
        engine.step(clock.t)


def _finished(steps: list[IterationStats]) -> list[FinishedRequestStats]:
    return [f for s in steps for f in s.finished]


def test_ttft_is_queue_plus_prefill_and_slots_make_queue_time():
    engine, clock, steps = _engine(max_num_seqs=1)
    first = engine.submit(prompt_tokens=100)
    second = engine.submit(prompt_tokens=100)
    _run_until_idle(engine, clock)
    # prefill = 0.1 + 100 * 0.001 = 0.2 s; 10 tokens, 9 gaps of 10 ms.
    assert first.first_token_at == pytest.approx(0.2)
    assert first.finished_at == pytest.approx(0.29)
    assert second.first_scheduled == pytest.approx(0.29)  # the slot freed only then
    done = {f.queued_time: f for f in _finished(steps)}
    late = done[max(done)]
    assert late.queued_time == pytest.approx(0.29)
    assert late.prefill_time == pytest.approx(0.2)
    assert late.e2e_latency == pytest.approx(0.29 + 0.29)
    ttfts = [t for s in steps for t in s.time_to_first_tokens]
    assert ttfts == pytest.approx([0.2, 0.49])
    assert late.mean_time_per_output_token == pytest.approx(0.01)


def test_finish_reason_follows_max_tokens():
    engine, clock, steps = _engine()
    capped = engine.submit(prompt_tokens=5, max_tokens=4)
    free = engine.submit(prompt_tokens=5, max_tokens=50)
    _run_until_idle(engine, clock)
    assert (capped.finish_reason, capped.emitted) == ("length", 4)
    assert (free.finish_reason, free.emitted) == ("stop", 10)
    assert sum(s.num_generation_tokens for s in steps) == 14
    assert sum(len(s.inter_token_latencies) for s in steps) == 14 - 2


def test_same_seed_same_run():
    profile = LatencyProfile(output_tokens=(5, 500), jitter=0.3)

    def run(seed: int) -> list[tuple[float, int]]:
        engine, clock, steps = _engine(profile, seed=seed)
        for words in (10, 200, 3000):
            engine.submit(words)
        _run_until_idle(engine, clock)
        return [(f.e2e_latency, f.num_generation_tokens) for f in _finished(steps)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_full_kv_cache_preempts_the_newest_and_it_recovers():
    # 4 blocks of 16 tokens: two 16-token prompts fit, two 56-token sequences do not.
    longer = dataclasses.replace(EXACT, output_tokens=(40, 40))
    engine, clock, steps = _engine(longer, kv_cache_tokens=64)
    old = engine.submit(prompt_tokens=16)
    new = engine.submit(prompt_tokens=16)
    _run_until_idle(engine, clock)
    assert sum(s.num_preemptions for s in steps) >= 1
    assert new.num_preemptions >= 1 and old.num_preemptions == 0
    assert (old.emitted, new.emitted) == (40, 40)
    assert new.finished_at is not None and old.finished_at is not None
    assert new.finished_at > old.finished_at
    # The preempted request's next token waited for the recompute: one long gap.
    assert max(t for s in steps for t in s.inter_token_latencies) > 0.1


def test_snapshot_reports_running_waiting_and_usage():
    engine, clock, _ = _engine(max_num_seqs=2, kv_cache_tokens=1600)
    for _ in range(3):
        engine.submit(prompt_tokens=400)
    engine.step(clock.t)
    snap = engine.snapshot()
    assert (snap.num_running, snap.num_waiting) == (2, 1)
    assert snap.kv_cache_usage == pytest.approx(800 / 1600)


def test_abort_while_waiting_counts_queue_time_only():
    engine, clock, steps = _engine(max_num_seqs=1)
    engine.submit(prompt_tokens=10)
    waiting = engine.submit(prompt_tokens=10)
    engine.step(clock.t)
    clock.t = 0.05
    engine.abort(waiting)
    (aborted,) = _finished(steps)
    assert aborted.finish_reason == "abort"
    assert aborted.e2e_latency == pytest.approx(0.05) == aborted.queued_time
    assert aborted.num_generation_tokens == 0
    assert waiting not in engine.waiting


def test_error_burst_fails_at_admission():
    engine, clock, steps = _engine()
    engine.inject("error_burst", 1.0)
    request = engine.submit(prompt_tokens=10)
    engine.step(clock.t)
    assert request.finish_reason == "error"
    assert _finished(steps)[0].finish_reason == "error"
    assert not engine.running


def test_rejects_what_vllm_rejects():
    engine, _, _ = _engine(max_model_len=100)
    with pytest.raises(ValueError, match="maximum context length"):
        engine.submit(prompt_tokens=90, max_tokens=20)
    with pytest.raises(ValueError, match="max_tokens"):
        engine.submit(prompt_tokens=10, max_tokens=0)
    assert engine.submit(prompt_tokens=90).max_tokens == 10  # default: what the window leaves
