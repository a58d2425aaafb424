"""Local GPUs through NVML (nvidia-ml-py's `pynvml`, injected so tests pass a fake module).

Every call here blocks and can hang forever on a wedged driver: `LocalGpus` runs them on a
worker thread per GPU under a deadline. Most reads are cheap, but total energy and the MIG
mode cost far more (docs/performance.md), so those two are read every `slow_interval_s`
instead, and field values / PCIe throughput (20 ms, it samples) never.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from monitor.infra.fields import GPU_FIELDS, NvmlCall
from monitor.infra.reading import GpuIdentity, GpuLost, GpuReading, MigReading, NotPresent
from monitor.infra.xid import XidListener

T = TypeVar("T")

# NVML return codes by meaning, looked up on the injected module by name.
_ABSENT = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_FUNCTION_NOT_FOUND")
_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN")
_NOT_PRESENT = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")
_EMPTY_MIG_SLOT = ("NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT")
# nvmlDeviceGetNvLinkErrorCounter's counters -> GpuReading attribute (each summed over active links).
_NVLINK_COUNTERS = (("NVML_NVLINK_ERROR_DL_CRC_FLIT", "nvlink_crc_flit_errors"),
                    ("NVML_NVLINK_ERROR_DL_CRC_DATA", "nvlink_crc_data_errors"),
                    ("NVML_NVLINK_ERROR_DL_REPLAY", "nvlink_replay_errors"),
                    ("NVML_NVLINK_ERROR_DL_RECOVERY", "nvlink_recovery_errors"))


@dataclass
class _MigSlot:
    instance: str
    profile: str
    handle: Any


@dataclass
class _SlowFields:
    """Fields read every `slow_interval_s`, kept between ticks."""

    read_at: float
    energy_joules: float | None = None
    mig: list[_MigSlot] = field(default_factory=list)
    nvlink: dict[str, float] = field(default_factory=dict)  # empty: no NVLink (or none active)


class NvmlBackend:
    def __init__(self, nvml: Any, clock: Callable[[], float] = time.monotonic, slow_interval_s: float = 30.0) -> None:
        self.nvml = nvml
        self.clock = clock
        self.slow_interval_s = slow_interval_s
        self._codes = {name: getattr(nvml, name) for name in (*_ABSENT, *_LOST, *_NOT_PRESENT, *_EMPTY_MIG_SLOT)
                       if hasattr(nvml, name)}
        self._handles: dict[int, Any] = {}
        self._slow: dict[int, _SlowFields] = {}
        self._memory_v2: dict[int, bool] = {}
        self._initialised = False
        self.xids = XidListener(nvml, lambda exc: self._is(exc, _ABSENT))
        # Per GPU, the calls it refused (NOT_SUPPORTED and the like): not asked again until the next
        # slow read. An H200 refuses page retirement every tick otherwise, an exception a call.
        self._refused: dict[int, set[str]] = {}
        self._bound_table: tuple[object, list[tuple[str, NvmlCall, Callable[..., Any], tuple[Any, ...]]]] = ((), [])

    # -- life cycle -------------------------------------------------------------------------

    def open(self) -> list[GpuIdentity]:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            if self._is(exc, _NOT_PRESENT):
                raise NotPresent(f"NVML not present: {_error_name(exc)}") from None
            raise
        self._initialised = True
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        identities = [self._identity(index, driver) for index in range(nvml.nvmlDeviceGetCount())]
        self.xids.start(self._handles)
        return identities

    def _identity(self, index: int, driver: str) -> GpuIdentity:
        # A GPU already lost at start still counts: it is listed with gpu_up 0, not hidden.
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid, name = _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError as exc:
            if not self._is(exc, _LOST):
                raise
            return GpuIdentity(index, "", "", driver)
        self._handles[index] = handle
        return GpuIdentity(index, uuid, name, driver)

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            self.xids.stop()
            self.nvml.nvmlShutdown()

    # -- one GPU ----------------------------------------------------------------------------

    def read(self, index: int) -> GpuReading:
        nvml, handle = self.nvml, self._handles.get(index)
        if handle is None:
            raise GpuLost("GPU lost: no handle since start")
        slow = self._slow_fields(index, handle)
        used, total, reserved = self._memory(index, handle)
        utilization = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        refused = self._refused.setdefault(index, set())
        plain: dict[str, float | None] = {attribute: self._plain(attribute, call, function, handle, args, refused)
                                          for attribute, call, function, args in self._bound()}
        rows = self._unless_refused(refused, "nvmlDeviceGetRemappedRows", handle)
        if rows is not None:  # (correctable, uncorrectable, pending, failure occurred)
            plain.update(zip(("row_remap_correctable_rows", "row_remap_uncorrectable_rows", "row_remap_pending",
                              "row_remap_failed"), map(float, rows), strict=True))
        return GpuReading(
            kernel_active_ratio=None if utilization is None else utilization.gpu / 100.0,
            memory_used_bytes=used,
            memory_total_bytes=total,
            memory_reserved_bytes=reserved,
            energy_joules=slow.energy_joules,
            clock_event_mask=self._optional(self._clock_events_call(), handle),
            mig=tuple(self._mig_reading(slot) for slot in slow.mig),
            xid_events=self.xids.take(index),
            **cast(dict[str, Any], {**slow.nvlink, **plain}),  # each a float or None, by the table's attribute names
        )

    def _bound(self) -> list[tuple[str, NvmlCall, Callable[..., Any], tuple[Any, ...]]]:
        """The table's NVML calls with their functions and constants looked up once (per table)."""
        table, bound = self._bound_table
        if table is not GPU_FIELDS:
            nvml = self.nvml
            bound = [(f.attribute, f.nvml, getattr(nvml, f.nvml.function),
                      tuple(getattr(nvml, c) for c in f.nvml.constants)) for f in GPU_FIELDS if f.nvml is not None]
            self._bound_table = (GPU_FIELDS, bound)
        return bound

    def _plain(self, attribute: str, call: NvmlCall, function: Callable[..., Any], handle: Any, args: tuple[Any, ...],
               refused: set[str]) -> float | None:
        """A plain field of fields.GPU_FIELDS, in base units; None where the GPU does not support it."""
        if attribute in refused:
            return None
        raw = self._optional(function, handle, *args)
        if raw is None:
            refused.add(attribute)
            return None
        return float(len(raw)) if call.count else float(raw) / call.divide * call.multiply

    def _unless_refused(self, refused: set[str], function: str, handle: Any) -> Any:
        if function in refused or not hasattr(self.nvml, function):
            return None
        value = self._optional(getattr(self.nvml, function), handle)
        if value is None:
            refused.add(function)
        return value

    def _memory(self, index: int, handle: Any) -> tuple[float | None, float | None, float | None]:
        # v2 separates driver-reserved memory from `used`; old drivers only answer v1.
        nvml = self.nvml
        if self._memory_v2.get(index, hasattr(nvml, "nvmlMemory_v2")):
            info = self._optional(nvml.nvmlDeviceGetMemoryInfo, handle, nvml.nvmlMemory_v2)
            if info is not None:
                self._memory_v2[index] = True
                return float(info.used), float(info.total), float(info.reserved)
            self._memory_v2[index] = False
        info = self._optional(nvml.nvmlDeviceGetMemoryInfo, handle)
        if info is None:
            return None, None, None
        return float(info.used), float(info.total), None

    def _clock_events_call(self) -> Callable[[Any], int]:
        nvml = self.nvml  # "clocks event reasons" is the current name; older bindings say throttle
        call: Callable[[Any], int] = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return call

    def _slow_fields(self, index: int, handle: Any) -> _SlowFields:
        now = self.clock()
        slow = self._slow.get(index)
        if slow is not None and now - slow.read_at < self.slow_interval_s:
            return slow
        self._refused.pop(index, None)  # ask the refused calls again, every slow interval
        energy_mj = self._optional(self.nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        slow = _SlowFields(now, None if energy_mj is None else energy_mj / 1000.0, self._mig_slots(handle),
                           self._nvlink(handle))
        self._slow[index] = slow
        return slow

    def _nvlink(self, handle: Any) -> dict[str, float]:
        """NVLink error counters summed over the active links: up to 18 links x 5 calls, so on the
        slow interval. A GPU without NVLink answers NOT_SUPPORTED on link 0: no fields at all."""
        nvml = self.nvml
        if not hasattr(nvml, "nvmlDeviceGetNvLinkState"):
            return {}
        totals: dict[str, float] = {}
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                active = nvml.nvmlDeviceGetNvLinkState(handle, link)
            except nvml.NVMLError as exc:
                if self._is(exc, (*_ABSENT, "NVML_ERROR_INVALID_ARGUMENT")):
                    break  # no NVLink, or past the GPU's last link
                raise self._translate(exc) from None
            if active != getattr(nvml, "NVML_FEATURE_ENABLED", 1):
                continue
            for constant, attribute in _NVLINK_COUNTERS:
                count = self._optional(nvml.nvmlDeviceGetNvLinkErrorCounter, handle, link, getattr(nvml, constant))
                if count is not None:
                    totals[attribute] = totals.get(attribute, 0.0) + float(count)
        return totals

    def _mig_slots(self, handle: Any) -> list[_MigSlot]:
        nvml = self.nvml
        mode = self._optional(nvml.nvmlDeviceGetMigMode, handle)
        if not mode or mode[0] != nvml.NVML_DEVICE_MIG_ENABLE:
            return []
        slots = []
        for slot in range(self._optional(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            try:
                mig_handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError as exc:
                if self._is(exc, _EMPTY_MIG_SLOT):
                    continue
                raise self._translate(exc) from None
            instance = self._optional(nvml.nvmlDeviceGetGpuInstanceId, mig_handle)
            name = _text(self._optional(nvml.nvmlDeviceGetName, mig_handle) or "")
            slots.append(_MigSlot(str(instance if instance is not None else slot), _mig_profile(name), mig_handle))
        return slots

    def _mig_reading(self, slot: _MigSlot) -> MigReading:
        info = self._optional(self.nvml.nvmlDeviceGetMemoryInfo, slot.handle)
        if info is None:
            return MigReading(slot.instance, slot.profile)
        return MigReading(slot.instance, slot.profile, float(info.used), float(info.total))

    # -- errors are states ------------------------------------------------------------------

    def _optional(self, call: Callable[..., T], *args: Any) -> T | None:
        """The call's value; None where the GPU does not support it; GpuLost when it is gone."""
        try:
            return call(*args)
        except self.nvml.NVMLError as exc:
            if self._is(exc, _ABSENT):
                return None
            raise self._translate(exc) from None

    def _translate(self, exc: Exception) -> Exception:
        if self._is(exc, _LOST):
            return GpuLost(f"GPU lost: {_error_name(exc)}")
        return exc

    def _is(self, exc: Exception, names: tuple[str, ...]) -> bool:
        value = getattr(exc, "value", None)
        return any(self._codes.get(name) == value for name in names)


def _error_name(exc: Exception) -> str:
    # pynvml's str() asks the (possibly missing) library for the text; the class name is enough.
    return type(exc).__name__.removeprefix("NVMLError_") or "NVMLError"


def _mig_profile(name: str) -> str:
    # MIG device names read "NVIDIA H100 80GB HBM3 MIG 3g.40gb", as nvidia-smi prints them.
    _, marker, profile = name.rpartition("MIG ")
    return profile.strip() if marker else ""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value

