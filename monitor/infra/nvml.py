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

T = TypeVar("T")

# NVML return codes by meaning, looked up on the injected module by name.
_ABSENT = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_FUNCTION_NOT_FOUND")
_LOST = ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN")
_NOT_PRESENT = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")
_EMPTY_MIG_SLOT = ("NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT")


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
        return [self._identity(index, driver) for index in range(nvml.nvmlDeviceGetCount())]

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
            self.nvml.nvmlShutdown()

    # -- one GPU ----------------------------------------------------------------------------

    def read(self, index: int) -> GpuReading:
        nvml, handle = self.nvml, self._handles.get(index)
        if handle is None:
            raise GpuLost("GPU lost: no handle since start")
        slow = self._slow_fields(index, handle)
        used, total, reserved = self._memory(index, handle)
        utilization = self._optional(nvml.nvmlDeviceGetUtilizationRates, handle)
        plain = {f.attribute: self._plain(f.nvml, handle) for f in GPU_FIELDS if f.nvml is not None}
        return GpuReading(
            kernel_active_ratio=None if utilization is None else utilization.gpu / 100.0,
            memory_used_bytes=used,
            memory_total_bytes=total,
            memory_reserved_bytes=reserved,
            energy_joules=slow.energy_joules,
            clock_event_mask=self._optional(self._clock_events_call(), handle),
            mig=tuple(self._mig_reading(slot) for slot in slow.mig),
            **cast(dict[str, Any], plain),  # each a float or None, by the table's attribute names
        )

    def _plain(self, call: NvmlCall, handle: Any) -> float | None:
        """A plain field of fields.GPU_FIELDS, in base units; None where the GPU does not support it."""
        nvml = self.nvml
        raw = self._optional(getattr(nvml, call.function), handle, *(getattr(nvml, c) for c in call.constants))
        return None if raw is None else float(raw) / call.divide * call.multiply

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
        energy_mj = self._optional(self.nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        slow = _SlowFields(now, None if energy_mj is None else energy_mj / 1000.0, self._mig_slots(handle))
        self._slow[index] = slow
        return slow

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

