"""Configuration of the vLLM V1 simulator: the engine's shape and its latency model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from monitor.sim.tiers import HostTier, MoeProfile, PdSplit

DEFAULT_MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True)
class EngineConfig:
    model_name: str = DEFAULT_MODEL
    max_num_seqs: int = 256
    # 29127 blocks x 16 tokens: what an H200 leaves for Llama-3.1-8B at 0.9 memory use.
    kv_cache_tokens: int = 29127 * 16
    block_size: int = 16
    max_model_len: int = 32768
    # Multiplies every modelled duration; 0.1 runs the same traffic shape 10x faster.
    time_scale: float = 1.0
    # Lower bound between two steps: coalesces token deliveries to bound CPU per second.
    min_step_s: float = 0.005
    deterministic: bool = False
    seed: int = 0
    # Serving shapes, all off by default (monitor.sim.tiers): a host-memory KV tier, the decode side
    # of a prefill/decode split, an MoE model under expert parallelism.
    host_tier: HostTier | None = None
    pd: PdSplit | None = None
    moe: MoeProfile | None = None
    # Whose /metrics page the simulator serves: vLLM V1's (the default) or SGLang's, whose HiCache
    # load-back histogram and EPLB balancedness vLLM does not print.
    page: Literal["vllm", "sglang"] = "vllm"

    @property
    def num_gpu_blocks(self) -> int:
        return max(1, self.kv_cache_tokens // self.block_size)


@dataclass(frozen=True)
class LatencyProfile:
    """Stationary latency model: every draw is uniform and bounded, so percentiles do not
    drift over time (the integration tests compare P99s within 2 %)."""

    prefill_s: float = 0.04  # fixed cost of a prefill step
    prefill_per_token_s: float = 0.0001  # per prompt token actually computed (not cached)
    per_token_s: float = 0.015  # decode time per output token
    output_tokens: tuple[int, int] = (40, 400)  # drawn uniformly, inclusive
    jitter: float = 0.1  # relative, uniform in [1 - jitter, 1 + jitter]
    prefix_hit_ratio: float = 0.35  # share of each prompt found in the prefix cache
