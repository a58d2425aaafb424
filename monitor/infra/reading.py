"""What every GPU source produces: plain readings in base units, and the one backend protocol.

A field a GPU does not support is `None` (its series is absent, never 0). A GPU that fell off
the bus raises `GpuLost`; a host without NVML raises `NotPresent` (a state, not a failure).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

# NVML clock-event reason bits (nvmlClocksEventReason*) -> our `reason` label. DCGM's
# DCGM_FI_DEV_CLOCKS_EVENT_REASONS field carries the same bitmask.
CLOCK_EVENT_REASONS: dict[str, int] = {
    "gpu_idle": 0x1,
    "app_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}


class GpuLost(Exception):
    """The GPU stopped answering (NVML GPU_IS_LOST / UNKNOWN): up = 0, other series go."""

    plain = True


class NotPresent(Exception):
    """No NVML library or no driver on this host: the collector is absent, not failing."""

    plain = True


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    uuid: str
    model: str
    driver: str


@dataclass(frozen=True)
class MigReading:
    """One MIG GPU instance: memory only (NVML has no utilization for instances)."""

    instance: str  # GPU instance id
    profile: str  # e.g. "3g.40gb"; "" when unknown
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    workload: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuReading:
    """One GPU at one moment, in base units; None = not supported / not reported."""

    kernel_active_ratio: float | None = None  # NVML utilization.gpu / DCGM_FI_DEV_GPU_UTIL
    graphics_engine_active_ratio: float | None = None  # DCGM_FI_PROF_GR_ENGINE_ACTIVE only
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    memory_reserved_bytes: float | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    sm_clock_hertz: float | None = None
    clock_event_mask: int | None = None
    ecc_uncorrected_errors: float | None = None  # volatile: since the last driver load or GPU reset
    ecc_corrected_errors: float | None = None
    # Memory repair (GpuErrors, monitor/infra/ledger.py, turns the counters into increases).
    row_remap_correctable_rows: float | None = None  # Ampere and newer
    row_remap_uncorrectable_rows: float | None = None
    row_remap_pending: float | None = None  # 1: a remap waits for a GPU reset
    row_remap_failed: float | None = None  # 1: a remap failed (no spare row): RMA
    retired_pages_sbe: float | None = None  # Volta and older (page retirement)
    retired_pages_dbe: float | None = None
    retired_pages_pending: float | None = None  # 1: a retirement waits for a reset
    pcie_replay_errors: float | None = None
    nvlink_crc_flit_errors: float | None = None  # summed over the GPU's links
    nvlink_crc_data_errors: float | None = None
    nvlink_replay_errors: float | None = None
    nvlink_recovery_errors: float | None = None
    xid_last: float | None = None  # dcgm-exporter: the last XID seen (0: none), a gauge that sticks
    xid_events: tuple[int, ...] | None = None  # NVML: XIDs delivered since the last read; None: no event API
    # dcgm-exporter's own XID counts by XID, where its CSV enables them: DCGM_EXP_XID_ERRORS_TOTAL (since
    # the exporter started) or DCGM_EXP_XID_ERRORS_COUNT (over its sliding window). Preferred to xid_last.
    xid_totals: Mapping[str, float] | None = None
    xid_window_counts: Mapping[str, float] | None = None
    mig: tuple[MigReading, ...] = ()
    workload: Mapping[str, str] = field(default_factory=dict)  # Kubernetes pod/namespace/container

    @property
    def utilization_ratio(self) -> float | None:
        """The preferred utilization: graphics-engine activity where the source has it.

        "A kernel was running" (NVML's utilization) reads 100 % for a GPU doing a trickle of
        work; the graphics engine's active ratio is what LLM serving actually keeps busy.
        """
        if self.graphics_engine_active_ratio is not None:
            return self.graphics_engine_active_ratio
        return self.kernel_active_ratio

    @property
    def memory_used_ratio(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    @property
    def retired_pages(self) -> float | None:
        """Pages retired for either cause: DCGM's health check fails a GPU at 60 or more."""
        if self.retired_pages_sbe is None and self.retired_pages_dbe is None:
            return None
        return (self.retired_pages_sbe or 0.0) + (self.retired_pages_dbe or 0.0)

    @property
    def power_used_ratio(self) -> float | None:
        """Draw over the enforced limit: the alert rules compare a ratio, never two metrics."""
        if self.power_watts is None or not self.power_limit_watts:
            return None
        return self.power_watts / self.power_limit_watts


class GpuBackend(Protocol):
    """A source of local GPUs. Calls block (NVML can hang), so callers run them off the loop."""

    def open(self) -> list[GpuIdentity]:
        """Initialise and list the GPUs; raises NotPresent when there is no NVML/driver."""
        ...

    def read(self, index: int) -> GpuReading:
        """Read one GPU; raises GpuLost when it is gone."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class GpuState:
    """One GPU as the collector last saw it: what /metrics renders for it."""

    node: str
    gpu: str  # the index, as a label value
    source: str  # "nvml", "replay", or the dcgm target's name
    up: bool
    identity: GpuIdentity | None = None
    reading: GpuReading | None = None  # None whenever up is False: its series disappear
    error: str | None = None
    errors: GpuErrors | None = None  # kept across reads by the ledger; shown while the GPU is down too


@dataclass(frozen=True)
class GpuErrors:
    """A GPU's error history as the ledger (monitor/infra/ledger.py) keeps it across reads."""

    xid_total: Mapping[str, float] = field(default_factory=dict)  # XID -> events counted since start
    xid_recent: Mapping[str, float] = field(default_factory=dict)  # XID -> events in the XID window
    increase: Mapping[str, float] = field(default_factory=dict)  # error kind -> increase over its window

    @property
    def faults(self) -> tuple[str, ...]:
        """The recent XIDs, as words for a cause or a status line."""
        return tuple(f"XID {xid}" for xid, count in sorted(self.xid_recent.items()) if count > 0)


@dataclass(frozen=True)
class InfraView:
    ts: float
    gpus: tuple[GpuState, ...] = ()
