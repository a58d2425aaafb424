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

FaultKind = Literal["latency_spike", "error_burst", "throughput_drop", "kv_pressure"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)

# What magnitude means per kind, and the default when a config leaves it out.
#   latency_spike:   prefill time (hence TTFT) is multiplied by it      (> 0, e.g. 8)
#   error_burst:     fraction of arriving requests that fail with 500   (0..1)
#   throughput_drop: per-output-token time is multiplied by it          (> 0, e.g. 3)
#   kv_pressure:     fraction of the KV-cache capacity left usable      (0 < m <= 1)
DEFAULT_MAGNITUDE: dict[FaultKind, float] = {
    "latency_spike": 8.0,
    "error_burst": 0.5,
    "throughput_drop": 3.0,
    "kv_pressure": 0.05,
}


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
    allowed_zero = kind == "error_burst" and magnitude == 0
    if (not math.isfinite(magnitude) or magnitude <= 0) and not allowed_zero:
        raise ValueError(f"{kind} magnitude must be a positive number, got {magnitude}")
    if kind in ("error_burst", "kv_pressure") and magnitude > 1:
        raise ValueError(f"{kind} magnitude is a fraction (0..1), got {magnitude}")


@dataclass(frozen=True)
class FaultEffects:
    """The combined effect of all active faults at one instant (identity = no fault)."""

    prefill_mult: float = 1.0
    per_token_mult: float = 1.0
    error_fraction: float = 0.0
    kv_capacity_mult: float = 1.0


def combine_effects(faults: Iterable[Fault]) -> FaultEffects:
    """Overlapping faults compound: multipliers multiply, error chances combine like
    independent events (1 - prod(1 - f)), so two 50 % bursts fail 75 % of requests."""
    prefill = per_token = kv = survive = 1.0
    for fault in faults:
        if fault.kind == "latency_spike":
            prefill *= fault.magnitude
        elif fault.kind == "throughput_drop":
            per_token *= fault.magnitude
        elif fault.kind == "kv_pressure":
            kv *= fault.magnitude
        else:
            survive *= 1.0 - fault.magnitude
    return FaultEffects(prefill, per_token, 1.0 - survive, kv)


@dataclass(frozen=True)
class FaultSchedule:
    """Faults on the simulator's timeline; with `cycle_s` the timeline repeats (the demo)."""

    faults: tuple[Fault, ...] = ()
    cycle_s: float | None = None

    def active(self, elapsed_s: float) -> tuple[Fault, ...]:
        t = elapsed_s % self.cycle_s if self.cycle_s else elapsed_s
        return tuple(f for f in self.faults if f.active_at(t))

    def effects(self, elapsed_s: float) -> FaultEffects:
        return combine_effects(self.active(elapsed_s))

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


DEMO_CYCLE_S = 600.0


def demo_schedule() -> FaultSchedule:
    """A 10-minute loop that shows every fault once, with quiet gaps in between so each
    alert can fire and resolve: spike at 1:00, errors at 3:30, slow decode at 6:00,
    KV pressure at 8:00 (each 90 s)."""
    faults = (
        Fault(60.0, 90.0, "latency_spike", 8.0),
        Fault(210.0, 90.0, "error_burst", 0.05),
        Fault(360.0, 90.0, "throughput_drop", 3.0),
        Fault(480.0, 90.0, "kv_pressure", 0.02),
    )
    return FaultSchedule(faults, cycle_s=DEMO_CYCLE_S)
