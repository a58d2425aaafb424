"""The simulator's optional serving shapes: a host-memory KV tier, a prefill/decode split, an MoE model.

Each is off unless `EngineConfig` names it, so a default simulator is the plain vLLM V1 engine. On:

    host tier   a prompt's KV that the GPU prefix cache missed but host memory holds (a session that
                revisits its prefix) is loaded back over the host link instead of recomputed; every
                computed prompt is stored there, least recently used sessions evicted past capacity.
                swap-back = op overhead + tokens x KV bytes per token / link bandwidth
    P/D split   the simulator plays the decode instance: the prompt's KV arrives over the network from
                a prefill instance, so TTFT = prefill + transfer + first decode step. A failed transfer
                is recomputed locally (vLLM's recompute policy): the prefill is paid twice.
    MoE         every decode step's expert balancedness (mean / max tokens per EP rank, 1 = even),
                drawn around a level; a step waits for the busiest rank, so imbalance slows decode.

The models are pure: `HostTierState` keeps the tier's contents, the rest are arithmetic on the
request's sizes and the active faults.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

# K and V of Llama-3.1-8B's 32 layers x 8 KV heads x 128 dims in bf16: what a token's KV cache holds.
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
PREFIX_KEY_WORDS = 64  # a session is known by its prompt's first words (its system prompt and history)


@dataclass(frozen=True)
class HostTier:
    """CPU offloading (vLLM's OffloadingConnector, SGLang's HiCache) on a PCIe Gen5 host link."""

    capacity_tokens: int = 2_000_000  # 256 GiB of host memory at 128 KiB a token
    link_gb_s: float = 50.0  # host-to-device copy bandwidth actually reached, GB/s
    op_overhead_s: float = 0.001  # fixed cost of one load or store (launch, sync)

    def __post_init__(self) -> None:
        if self.capacity_tokens < 1 or not self.link_gb_s > 0 or self.op_overhead_s < 0:
            raise ValueError("host tier needs capacity_tokens >= 1, link_gb_s > 0, op_overhead_s >= 0")

    def transfer_s(self, tokens: int, slowdown: float = 1.0) -> float:
        return (self.op_overhead_s + tokens * KV_BYTES_PER_TOKEN / (self.link_gb_s * 1e9)) * slowdown


@dataclass(frozen=True)
class PdSplit:
    """Prefill/decode disaggregation over RDMA (NIXL, Mooncake): KV of the whole prompt moves once."""

    link_gb_s: float = 25.0  # 200 Gb/s
    overhead_s: float = 0.002  # handshake and completion notification

    def __post_init__(self) -> None:
        if not self.link_gb_s > 0 or self.overhead_s < 0:
            raise ValueError("P/D split needs link_gb_s > 0 and overhead_s >= 0")

    def transfer_s(self, tokens: int, slowdown: float = 1.0) -> float:
        return (self.overhead_s + tokens * KV_BYTES_PER_TOKEN / (self.link_gb_s * 1e9)) * slowdown


@dataclass(frozen=True)
class MoeProfile:
    """Expert parallelism's load balance: a healthy EPLB keeps it around `balancedness`."""

    balancedness: float = 0.88
    jitter: float = 0.04  # absolute, uniform
    # Share of a decode step spent in the MoE layers, which wait for the busiest rank.
    moe_share: float = 0.6

    def __post_init__(self) -> None:
        if not 0 < self.balancedness <= 1 or not 0 <= self.moe_share <= 1 or self.jitter < 0:
            raise ValueError("MoE profile needs 0 < balancedness <= 1, 0 <= moe_share <= 1, jitter >= 0")

    def step_slowdown(self, balance_mult: float) -> float:
        """A decode step's time relative to the healthy one when the balancedness is multiplied."""
        return 1.0 - self.moe_share + self.moe_share / balance_mult


@dataclass
class TierOp:
    tokens: int
    seconds: float

    @property
    def bytes(self) -> int:
        return self.tokens * KV_BYTES_PER_TOKEN


@dataclass
class HostTierState:
    """What host memory holds: tokens of KV per session prefix, least recently used first."""

    tier: HostTier
    sessions: OrderedDict[str, int] = field(default_factory=OrderedDict)
    used_tokens: int = 0

    def lookup(self, key: str | None) -> int:
        """Tokens held for the session (0: a miss); a hit makes it the most recently used."""
        if key is None or key not in self.sessions:
            return 0
        self.sessions.move_to_end(key)
        return self.sessions[key]

    def store(self, key: str | None, prompt_tokens: int, again: bool = False) -> tuple[int, int]:
        """Keep the session's prompt; returns (tokens copied to host memory now, tokens it dropped for
        room). What it holds already is not copied again unless `again` (the GPU evicted the whole
        prompt after the turn: the copy is made, over the link, whatever the host held)."""
        if key is None:
            return 0, 0
        held = self.sessions.get(key, 0)
        new = max(prompt_tokens - held, 0)
        if new:
            self.sessions[key] = held + new
            self.used_tokens += new
        self.sessions.move_to_end(key)
        capacity = self.tier.capacity_tokens
        evicted = 0
        while self.used_tokens > capacity and self.sessions:
            _, tokens = self.sessions.popitem(last=False)
            self.used_tokens -= tokens
            evicted += tokens
        return (prompt_tokens if again else new), evicted

    def usage(self) -> float:
        return min(self.used_tokens / self.tier.capacity_tokens, 1.0)


def prefix_key(text: str) -> str:
    """A session's key: its prompt's first PREFIX_KEY_WORDS words (shorter prompts: all of them)."""
    words = " ".join(text.split()[:PREFIX_KEY_WORDS])
    return hashlib.blake2b(words.encode(), digest_size=8).hexdigest()
