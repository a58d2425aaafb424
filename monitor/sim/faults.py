"""Fault schedule for the vLLM V1 simulator.

A fault is a timed disturbance of the simulated engine, so tests and the demo can make the
monitor's alerts fire on purpose. Times are seconds since the simulator started, read from
the simulator's (injected) clock; the schedule itself is pure data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

FaultKind = Literal["latency_spike", "error_burst", "throughput_drop", "kv_pressure", "engine_down", "traffic_dip",
                    "gpu_hold", "engine_unrecognised", "prefix_cache_loss", "slow_decay",
                    "slow_kv_tier", "kv_tier_thrash", "pd_transfer_fail", "pd_transfer_slow", "moe_imbalance"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)

# What magnitude means per kind, and the default when a config leaves it out.
#   latency_spike:   prefill time (hence TTFT) is multiplied by it      (> 0, e.g. 8)
#   error_burst:     fraction of arriving requests that fail with 500   (0..1)
#   throughput_drop: per-output-token time is multiplied by it          (> 0, e.g. 3)
#   kv_pressure:     fraction of the KV-cache capacity left usable      (0 < m <= 1)
#   engine_down:     the server answers 503 to everything, /metrics too (m unused, 1)
#   prefix_cache_loss: share of the prefix-cache hit ratio left (a new system prompt)  (0 < m <= 1)
#   slow_decay:      prefill and per-token time grow by this share a day of the fault's age, compounded
#                    (KV-cache fragmentation: latency that creeps with uptime)       (> 0, e.g. 0.04)
# Five that act only on a simulator configured with a host KV tier, a P/D split or an MoE model
# (monitor.sim.tiers; nothing to disturb otherwise):
#   slow_kv_tier:    each swap-back (host -> GPU load) and store takes m times longer  (> 0, e.g. 20)
#   kv_tier_thrash:  share of the GPU prefix cache's hits left: the working set no longer fits the GPU, each
#                    turn's KV is evicted to the host tier and loaded back at the next (ping-pong)  (0 < m <= 1)
#   pd_transfer_fail: share of P/D KV transfers that fail (the decode side recomputes the prefill)  (0..1)
#   pd_transfer_slow: each P/D KV transfer takes m times longer                        (> 0, e.g. 30)
#   moe_imbalance:   share of the experts' balancedness left (one EP rank gets the hot experts)  (0 < m <= 1)
#   engine_unrecognised: /metrics answers 200 with a valid page whose families no engine table
#                    knows (`vllm:` renamed `acme:`, an in-house build); the API serves on  (m unused, 1)
# Two kinds the simulated engine itself ignores, for what drives it in the demo:
#   traffic_dip:     share of the load generator's rate still sent      (0 < m <= 1)
#   gpu_hold:        the replayed GPU recording is held m seconds in    (> 0, e.g. 30: busy)
DEFAULT_MAGNITUDE: dict[FaultKind, float] = {
    "latency_spike": 8.0,
    "error_burst": 0.5,
    "throughput_drop": 3.0,
    "kv_pressure": 0.05,
    "engine_down": 1.0,
    "traffic_dip": 0.2,
    "gpu_hold": 30.0,
    "engine_unrecognised": 1.0,
    "prefix_cache_loss": 0.2,
    "slow_decay": 0.04,
    "slow_kv_tier": 20.0,
    "kv_tier_thrash": 0.05,
    "pd_transfer_fail": 0.3,
    "pd_transfer_slow": 30.0,
    "moe_imbalance": 0.5,
}
DAY_S = 86400.0


@dataclass(frozen=True)
class Fault:
    """One disturbance: `kind` with `magnitude`, active on [start_s, start_s + duration_s)."""

    start_s: float
    duration_s: float
    kind: FaultKind
    magnitude: float

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r} (expected one of {FAULT_KINDS})")
        if self.start_s < 0 or not self.duration_s > 0:
            raise ValueError("fault needs start_s >= 0 and duration_s > 0")
        _check_magnitude(self.kind, self.magnitude)

    def active_at(self, elapsed_s: float) -> bool:
        return self.start_s <= elapsed_s < self.start_s + self.duration_s


def _check_magnitude(kind: FaultKind, magnitude: float) -> None:
    allowed_zero = kind in ("error_burst", "pd_transfer_fail") and magnitude == 0
    if (not math.isfinite(magnitude) or magnitude <= 0) and not allowed_zero:
        raise ValueError(f"{kind} magnitude must be a positive number, got {magnitude}")
    if kind in ("error_burst", "kv_pressure", "traffic_dip", "prefix_cache_loss", "kv_tier_thrash", "pd_transfer_fail",
                "moe_imbalance") and magnitude > 1:
        raise ValueError(f"{kind} magnitude is a fraction (0..1), got {magnitude}")


@dataclass(frozen=True)
class FaultEffects:
    """The combined effect of all active faults at one instant (identity = no fault)."""

    prefill_mult: float = 1.0
    per_token_mult: float = 1.0
    error_fraction: float = 0.0
    kv_capacity_mult: float = 1.0
    down: bool = False
    traffic_mult: float = 1.0
    gpu_hold_s: float | None = None  # the latest-starting hold wins
    unrecognised: bool = False
    prefix_hit_mult: float = 1.0
    tier_time_mult: float = 1.0  # host tier loads and stores
    tier_gpu_keep: float = 1.0  # kv_tier_thrash: share of the GPU prefix cache's hits the GPU keeps
    pd_fail_fraction: float = 0.0
    pd_transfer_mult: float = 1.0
    moe_balance_mult: float = 1.0


def combine_effects(faults: Iterable[Fault], elapsed_s: float | None = None) -> FaultEffects:
    """Overlapping faults compound: multipliers multiply, error chances combine like
    independent events (1 - prod(1 - f)), so two 50 % bursts fail 75 % of requests. A slow
    decay's multiplier grows with the fault's age at `elapsed_s` (none given: not yet grown)."""
    prefill = per_token = kv = survive = traffic = prefix = 1.0
    down, hold, unrecognised = False, None, False
    serving = {"slow_kv_tier": 1.0, "kv_tier_thrash": 1.0, "pd_transfer_fail": 1.0, "pd_transfer_slow": 1.0,
               "moe_imbalance": 1.0}  # the serving shapes' faults: multipliers (pd_transfer_fail: survival)
    for fault in faults:
        if fault.kind in serving:
            serving[fault.kind] *= 1.0 - fault.magnitude if fault.kind == "pd_transfer_fail" else fault.magnitude
        elif fault.kind == "slow_decay":
            age_days = max(0.0, (elapsed_s if elapsed_s is not None else fault.start_s) - fault.start_s) / DAY_S
            grown = (1.0 + fault.magnitude) ** age_days
            prefill, per_token = prefill * grown, per_token * grown
        elif fault.kind == "engine_down":
            down = True
        elif fault.kind == "engine_unrecognised":
            unrecognised = True
        elif fault.kind == "traffic_dip":
            traffic *= fault.magnitude
        elif fault.kind == "gpu_hold":
            hold = fault.magnitude
        elif fault.kind == "latency_spike":
            prefill *= fault.magnitude
        elif fault.kind == "throughput_drop":
            per_token *= fault.magnitude
        elif fault.kind == "kv_pressure":
            kv *= fault.magnitude
        elif fault.kind == "prefix_cache_loss":
            prefix *= fault.magnitude
        else:
            survive *= 1.0 - fault.magnitude
    return FaultEffects(prefill, per_token, 1.0 - survive, kv, down, traffic, hold, unrecognised, prefix,
                        tier_time_mult=serving["slow_kv_tier"], tier_gpu_keep=serving["kv_tier_thrash"],
                        pd_fail_fraction=1.0 - serving["pd_transfer_fail"],
                        pd_transfer_mult=serving["pd_transfer_slow"], moe_balance_mult=serving["moe_imbalance"])


@dataclass(frozen=True)
class FaultSchedule:
    """Faults on the simulator's timeline; with `cycle_s` the timeline repeats (the demo)."""

    faults: tuple[Fault, ...] = ()
    cycle_s: float | None = None

    def active(self, elapsed_s: float) -> tuple[Fault, ...]:
        t = elapsed_s % self.cycle_s if self.cycle_s else elapsed_s
        return tuple(f for f in self.faults if f.active_at(t))

    def effects(self, elapsed_s: float) -> FaultEffects:
        return combine_effects(self.active(elapsed_s), elapsed_s)

    def with_fault(self, fault: Fault) -> FaultSchedule:
        return FaultSchedule((*self.faults, fault), self.cycle_s)


# Keys a config entry may carry; anything else is a typo we refuse rather than ignore.
_FAULT_KEYS = frozenset({"start_s", "duration_s", "kind", "magnitude"})


def parse_fault(entry: Mapping[str, Any], where: str = "fault") -> Fault:
    """Build one Fault from a config mapping; errors name the entry and the key."""
    unknown = set(entry) - _FAULT_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    kind = entry.get("kind")
    if kind not in FAULT_KINDS:
        raise ValueError(f"{where}.kind: {kind!r} is not one of {FAULT_KINDS}")
    typed_kind = cast(FaultKind, kind)
    try:
        return Fault(
            start_s=float(entry.get("start_s", 0.0)),
            duration_s=float(entry.get("duration_s", math.inf)),
            kind=typed_kind,
            magnitude=float(entry.get("magnitude", DEFAULT_MAGNITUDE[typed_kind])),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc


def parse_faults(entries: Iterable[Mapping[str, Any]]) -> list[Fault]:
    """`[{"kind": "error_burst", "start_s": 10, "duration_s": 30, "magnitude": 0.2}, ...]`"""
    return [parse_fault(entry, f"faults[{i}]") for i, entry in enumerate(entries)]


def parse_schedule(
    entries: Iterable[Mapping[str, Any]], cycle_s: float | None = None
) -> FaultSchedule:
    return FaultSchedule(tuple(parse_faults(entries)), cycle_s)


DEMO_SLOT_S = 180.0  # a 90-s fault, then 90 s for its alert (1m window, for <= 30s) to resolve
DEMO_CYCLE_S = 8 * DEMO_SLOT_S + 240.0 + 120.0  # eight slots, the last one 4 minutes, then 2 quiet ones
# Where the replayed H200 recording is held (seconds in): idle, busy at its power cap, memory 93 % full.
GPU_IDLE, GPU_BUSY, GPU_MEMFILL = 10.0, 30.0, 55.0


def demo_schedule() -> FaultSchedule:
    """A 30-minute loop in which each probable cause of an alert shows once (alert -> cause),
    with the demo's rules (monitor.sim.demo_cycle.demo_rules: 1m window, `for` at most 30 s):

         3:00 latency spike, GPU busy at its power cap   TTFTP99High    -> gpu_throttling
         6:00 error burst                                ErrorRateHigh  -> engine_errors
         9:00 slow decode, GPU busy: the queue grows     TTFTP99High    -> queue_saturation
        12:00 KV-cache pressure                          TTFTP99High    -> kv_cache_pressure
        15:00 latency spike, GPU memory 93 % full        TTFTP99High    -> gpu_memory
        18:00 the engine stops answering                 TargetDown     -> target_down
        21:00 latency spike, nothing else                TTFTP99High    -> unknown
        24:00 4 minutes of a fifth of the traffic        ThroughputDrop -> traffic_drop

    Each fault lasts 90 s (the traffic dip 4 minutes); between them the GPU recording follows
    the engine's load (monitor.sim.demo_cycle.HeldReplayClock)."""
    slot = DEMO_SLOT_S
    faults = (
        Fault(1 * slot, 90.0, "latency_spike", 30.0), Fault(1 * slot, 90.0, "gpu_hold", GPU_BUSY),
        Fault(2 * slot, 90.0, "error_burst", 0.05), Fault(2 * slot, 90.0, "gpu_hold", GPU_IDLE),
        Fault(3 * slot, 90.0, "throughput_drop", 6.0), Fault(3 * slot, 90.0, "gpu_hold", GPU_BUSY),
        Fault(4 * slot, 90.0, "kv_pressure", 0.004), Fault(4 * slot, 90.0, "gpu_hold", GPU_IDLE),
        Fault(5 * slot, 90.0, "latency_spike", 30.0), Fault(5 * slot, 90.0, "gpu_hold", GPU_MEMFILL),
        Fault(6 * slot, 90.0, "engine_down", 1.0), Fault(6 * slot, 90.0, "gpu_hold", GPU_IDLE),
        Fault(7 * slot, 90.0, "latency_spike", 30.0), Fault(7 * slot, 90.0, "gpu_hold", GPU_IDLE),
        Fault(8 * slot, 240.0, "traffic_dip", 0.2), Fault(8 * slot, 240.0, "gpu_hold", GPU_IDLE),
    )
    return FaultSchedule(faults, cycle_s=DEMO_CYCLE_S)

