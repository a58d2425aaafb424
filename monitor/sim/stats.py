"""Per-step statistics of the vLLM V1 simulator, shaped like vLLM's `v1/metrics/stats.py`.

The engine returns one `IterationStats` per step; the metrics layer turns it into counter
increments and histogram observations. Keeping this a plain value keeps the engine free of
prometheus_client and lets tests check the numbers without scraping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from monitor.sim.tiers import TierOp

FinishReason = Literal["stop", "length", "abort", "error", "repetition"]
# Every reason vLLM's FinishReason enum knows: the page carries all five children from the
# start. The simulator never produces "repetition" but keeps its zero series like vLLM.
FINISH_REASONS: tuple[FinishReason, ...] = ("stop", "length", "abort", "error", "repetition")


@dataclass(frozen=True)
class FinishedRequestStats:
    """Durations follow vLLM's definitions: queued = arrival -> first scheduled, prefill =
    first scheduled -> first token, decode = first token -> last token, inference = first
    scheduled -> last token, e2e = arrival -> finish."""

    finish_reason: FinishReason
    e2e_latency: float
    queued_time: float
    prefill_time: float
    decode_time: float
    inference_time: float
    num_prompt_tokens: int
    num_generation_tokens: int
    num_cached_tokens: int
    max_tokens_param: int | None
    n_param: int
    num_preemptions: int = 0  # times this request was preempted (vLLM's request_num_preemptions)

    @property
    def mean_time_per_output_token(self) -> float:
        # vLLM divides the decode phase by the gaps between tokens, not the tokens.
        if self.num_generation_tokens <= 1:
            return 0.0
        return self.decode_time / (self.num_generation_tokens - 1)

    @property
    def prefill_kv_computed_tokens(self) -> int:
        return max(self.num_prompt_tokens - self.num_cached_tokens, 0)


@dataclass
class IterationStats:
    """What happened in one engine step (or one abort outside a step)."""

    now: float
    num_prompt_tokens: int = 0
    num_cached_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    # Tokens the step pushed through the model: prefill (incl. recompute) + decode.
    num_scheduled_tokens: int = 0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    time_to_first_tokens: list[float] = field(default_factory=list)
    inter_token_latencies: list[float] = field(default_factory=list)
    finished: list[FinishedRequestStats] = field(default_factory=list)
    # The serving shapes (monitor.sim.tiers), empty when the engine has none: host-tier loads
    # (swap-backs) and stores, tokens the host tier dropped for room, prompt tokens looked up there
    # (the GPU missed them) and found; P/D transfers that arrived, transfers that failed; the
    # experts' balancedness of each decode step.
    num_loaded_prompt_tokens: int = 0  # of the first tokens' prompts: loaded back from the host tier
    kv_loads: list[TierOp] = field(default_factory=list)
    kv_stores: list[TierOp] = field(default_factory=list)
    kv_evicted_tokens: int = 0
    tier_lookup_tokens: int = 0
    tier_hit_tokens: int = 0
    pd_transfers: list[TierOp] = field(default_factory=list)
    pd_failed: int = 0
    moe_balancedness: list[float] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.num_scheduled_tokens or self.num_generation_tokens or self.finished)


@dataclass(frozen=True)
class EngineSnapshot:
    """Scheduler state at one instant: what vLLM's gauges show."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    host_tier_tokens: int | None = None  # tokens of KV the host tier holds (None: no tier)
    host_tier_capacity: int | None = None
    num_transferring: int = 0  # P/D: admitted requests still waiting for their KV to arrive
