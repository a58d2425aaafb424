"""Scheduler and KV cache of the simulated vLLM V1 engine (a simulator, not vLLM).

Like vLLM's scheduler it keeps a FIFO `waiting` queue and a `running` list capped at
`max_num_seqs`; a request is admitted when a slot is free and the KV cache has blocks for its
prompt, grows by one token per `per_token_s` while decoding, and the newest running request is
preempted (back to the front of the queue, recomputed later) when the cache overflows.

Everything here is a pure function of the clock reading it is handed: no sleeping, no I/O.
"""

from __future__ import annotations

import random
from collections import deque

from monitor.sim.faults import FaultEffects
from monitor.sim.profile import EngineConfig, LatencyProfile
from monitor.sim.request import SimRequest
from monitor.sim.stats import EngineSnapshot, FinishReason, IterationStats
from monitor.sim.tiers import HostTierState, TierOp


class Scheduler:
    def __init__(self, config: EngineConfig, profile: LatencyProfile) -> None:
        self.config = config
        self.profile = profile
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.host = HostTierState(config.host_tier) if config.host_tier is not None else None
        # The experts' draws apart from the requests' own, so a seeded run without MoE is unchanged.
        self._moe_rng = random.Random(config.seed + 1) if config.deterministic else random.Random()

    def step(self, now: float, effects: FaultEffects) -> IterationStats:
        """Deliver due tokens, finish, preempt on overflow, admit what fits."""
        stats = IterationStats(now)
        self._deliver_due_tokens(now, stats)
        if self.config.moe is not None and stats.num_generation_tokens:
            self._observe_balancedness(effects, stats)
        capacity = self._capacity_blocks(effects)
        self._preempt_over_capacity(capacity, stats)
        self._admit_waiting(now, capacity, effects, stats)
        return stats

    def abort(self, request: SimRequest, now: float) -> IterationStats:
        stats = IterationStats(now)
        if request.finished:
            return stats
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self._finish(request, "abort", now, stats)
        return stats

    def next_event_time(self) -> float | None:
        """When the next token is due; None when idle (nothing can happen until a submit)."""
        if not self.running:
            return None
        return min(r.next_token_time() for r in self.running)

    def snapshot(self, effects: FaultEffects) -> EngineSnapshot:
        host = self.host
        return EngineSnapshot(
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_cache_usage=min(self._used_blocks() / self._capacity_blocks(effects), 1.0),
            host_tier_tokens=host.used_tokens if host is not None else None,
            host_tier_capacity=host.tier.capacity_tokens if host is not None else None,
            num_transferring=sum(r.emitted == 0 for r in self.running) if self.config.pd is not None else 0,
        )

    def _deliver_due_tokens(self, now: float, stats: IterationStats) -> None:
        still_running = []
        for request in self.running:
            due = request.due_tokens(now)
            if due > request.emitted:
                self._emit(request, due, stats)
            if request.emitted >= request.target_tokens:
                assert request.last_token_at is not None
                self._finish(request, request.natural_finish_reason, request.last_token_at, stats)
            else:
                still_running.append(request)
        self.running = still_running

    def _emit(self, request: SimRequest, due: int, stats: IterationStats) -> None:
        first_new = request.emitted + 1
        first_time = request.token_time(first_new)
        if first_new == 1:
            request.first_token_at = first_time
            stats.time_to_first_tokens.append(first_time - request.arrival)
            stats.num_prompt_tokens += request.prompt_tokens
            stats.num_cached_prompt_tokens += request.cached_tokens
            stats.num_loaded_prompt_tokens += request.loaded_tokens
        else:
            assert request.last_token_at is not None
            # After a preemption this gap includes the wait and the recompute.
            stats.inter_token_latencies.append(first_time - request.last_token_at)
        # Within a segment every gap is the segment's per-token time.
        stats.inter_token_latencies.extend([request.seg_per_token] * (due - first_new))
        stats.num_generation_tokens += due - request.emitted
        stats.num_scheduled_tokens += due - request.emitted
        request.emitted = due
        request.last_token_at = request.token_time(due)
        request.notify_progress()

    def _preempt_over_capacity(self, capacity: int, stats: IterationStats) -> None:
        used = self._used_blocks()
        # The newest request goes first, like vLLM's FCFS policy; a lone request keeps
        # running even when it alone overflows a shrunken cache, so nothing deadlocks.
        while used > capacity and len(self.running) > 1:
            victim = self.running.pop()
            used -= self._blocks(victim.kv_tokens())
            victim.num_preemptions += 1
            self.waiting.appendleft(victim)
            stats.num_preemptions += 1

    def _admit_waiting(
        self, now: float, capacity: int, effects: FaultEffects, stats: IterationStats
    ) -> None:
        used = self._used_blocks()
        while self.waiting and len(self.running) < self.config.max_num_seqs:
            request = self.waiting[0]
            if request.will_error:
                self.waiting.popleft()
                request.first_scheduled = now
                self._finish(request, "error", now, stats)
                continue
            need = self._blocks(request.kv_tokens() + 1)
            if self.running and used + need > capacity:
                break
            self.waiting.popleft()
            self._schedule(request, now, effects, stats)
            used += need

    def _schedule(
        self, request: SimRequest, now: float, effects: FaultEffects, stats: IterationStats
    ) -> None:
        if request.first_scheduled is None:
            request.first_scheduled = now
            # kv_tier_thrash: the GPU keeps a share of its hits, the rest was evicted to the host tier
            kept = effects.prefix_hit_mult * (effects.tier_gpu_keep if self.host is not None else 1.0)
            request.cached_tokens = self._cached_tokens(request.prompt_tokens, kept)
            stats.prefix_cache_queries += request.prompt_tokens
            stats.prefix_cache_hits += request.cached_tokens
            swap_back_s = self._swap_back(request, effects, stats)
            computed = request.prompt_tokens - request.cached_tokens - request.loaded_tokens
            first = True
        else:
            computed = request.kv_tokens()  # a preempted request recomputes everything
            swap_back_s, first = 0.0, False
        scale = self.config.time_scale
        prefill = self._prefill_s(computed, request, effects) + swap_back_s
        per_token = self.profile.per_token_s * request.draws.per_token_jitter
        per_token *= effects.per_token_mult * scale
        if self.config.moe is not None:
            per_token *= self.config.moe.step_slowdown(effects.moe_balance_mult)
        if first and self.config.pd is not None:
            prefill += self._pd_transfer(request, effects, stats) + per_token  # TTFT: prefill + transfer + first decode
        request.start_segment(now + prefill, per_token)
        stats.num_scheduled_tokens += computed
        self.running.append(request)

    def _prefill_s(self, computed: int, request: SimRequest, effects: FaultEffects) -> float:
        prefill = self.profile.prefill_s + self.profile.prefill_per_token_s * computed
        return prefill * (request.draws.prefill_jitter * effects.prefill_mult * self.config.time_scale)

    def _swap_back(self, request: SimRequest, effects: FaultEffects, stats: IterationStats) -> float:
        """Host tier: load back what the GPU missed and host memory holds (whole blocks, never the last
        prompt token), then keep this prompt there. Returns the load's seconds (0: nothing loaded)."""
        host = self.host
        if host is None:
            return 0.0
        tier, block, scale = host.tier, self.config.block_size, self.config.time_scale
        held = host.lookup(request.prefix_key)
        stats.tier_lookup_tokens += request.prompt_tokens - request.cached_tokens
        loadable = min(held, request.prompt_tokens - 1) - request.cached_tokens
        request.loaded_tokens = max(loadable, 0) // block * block
        seconds = 0.0
        if request.loaded_tokens:
            seconds = tier.transfer_s(request.loaded_tokens, effects.tier_time_mult) * scale
            stats.kv_loads.append(TierOp(request.loaded_tokens, seconds))
            stats.tier_hit_tokens += request.loaded_tokens
        stored, evicted = host.store(request.prefix_key, request.prompt_tokens, again=effects.tier_gpu_keep < 1.0)
        if stored:
            stats.kv_stores.append(TierOp(stored, tier.transfer_s(stored, effects.tier_time_mult) * scale))
        stats.kv_evicted_tokens += evicted
        return seconds

    def _pd_transfer(self, request: SimRequest, effects: FaultEffects, stats: IterationStats) -> float:
        """P/D split: the prompt's KV from the prefill instance; a failed transfer is recomputed here."""
        assert self.config.pd is not None
        seconds = self.config.pd.transfer_s(request.prompt_tokens, effects.pd_transfer_mult) * self.config.time_scale
        if request.pd_roll < effects.pd_fail_fraction:
            stats.pd_failed += 1
            return seconds + self._prefill_s(request.prompt_tokens, request, effects)
        stats.pd_transfers.append(TierOp(request.prompt_tokens, seconds))
        return seconds

    def _observe_balancedness(self, effects: FaultEffects, stats: IterationStats) -> None:
        moe = self.config.moe
        assert moe is not None
        drawn = moe.balancedness + self._moe_rng.uniform(-moe.jitter, moe.jitter)
        stats.moe_balancedness.append(min(max(drawn * effects.moe_balance_mult, 0.01), 1.0))

    @staticmethod
    def _finish(
        request: SimRequest, reason: FinishReason, at: float, stats: IterationStats
    ) -> None:
        request.finish_reason = reason
        request.finished_at = at
        stats.finished.append(request.finish_stats())
        request.notify_done()

    def _cached_tokens(self, prompt_tokens: int, kept: float = 1.0) -> int:
        # Whole blocks only, and never the last prompt token: vLLM always recomputes it.
        block = self.config.block_size
        hit = int(prompt_tokens * self.profile.prefix_hit_ratio * kept) // block * block
        return min(hit, max(prompt_tokens - 1, 0))

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def _used_blocks(self) -> int:
        return sum(self._blocks(r.kv_tokens()) for r in self.running)

    def _capacity_blocks(self, effects: FaultEffects) -> int:
        return max(1, int(self.config.num_gpu_blocks * effects.kv_capacity_mult))
