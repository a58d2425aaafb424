"""Fake pynvml modules for the infra tests, all built on the real H200 recording.

`ReplayNvml` (the product's replay) is the well-behaved GPU; the subclasses here add one fault
each: calls that hang, a GPU that is lost mid-run, fields the GPU does not support, no library
or driver, MIG instances.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, ClassVar

import pynvml

from monitor.infra.replay import HealthEvent, ReplayNvml, Trace, load_trace
from tests.conftest import FIXTURES

TRACE_FILE = FIXTURES / "nvml_h200_trace.json"


def h200_trace() -> Trace:
    return load_trace(TRACE_FILE)


@dataclass
class FakeClock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def nvml_error(name: str) -> pynvml.NVMLError:
    return pynvml.NVMLError(getattr(pynvml, name))


class HangingNvml(ReplayNvml):
    """Reads of the GPUs in `hang` block (as a wedged driver does) until `release` is set."""

    def __init__(self, trace: Trace, clock: Callable[[], float], count: int, hang: set[int]) -> None:
        super().__init__(trace, clock, count)
        self.hang = hang
        self.release = threading.Event()
        self.entered = 0  # calls that started to hang

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        if handle in self.hang and not self.release.is_set():
            self.entered += 1
            self.release.wait(60)  # a bound, so a broken test cannot keep a thread forever
        return super().nvmlDeviceGetUtilizationRates(handle)


class HangingInit(ReplayNvml):
    def __init__(self, trace: Trace, clock: Callable[[], float]) -> None:
        super().__init__(trace, clock)
        self.release = threading.Event()

    def nvmlInit(self) -> None:
        self.release.wait(60)
        super().nvmlInit()


class LosableNvml(ReplayNvml):
    """Every call on the GPU raises `error` (GPU_IS_LOST, UNKNOWN) once `lost` is set."""

    def __init__(self, trace: Trace, clock: Callable[[], float], error: str = "NVML_ERROR_GPU_IS_LOST") -> None:
        super().__init__(trace, clock)
        self.lost = False
        self.error = error

    def _check(self, handle: int) -> None:
        if self.lost:
            raise nvml_error(self.error)
        super()._check(handle)


class UnsupportedNvml(ReplayNvml):
    """The listed calls answer NotSupported, as fan speed does on an H200."""

    def __init__(self, trace: Trace, clock: Callable[[], float], unsupported: set[str]) -> None:
        super().__init__(trace, clock)
        self.unsupported = unsupported

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvmlDevice") and name in object.__getattribute__(self, "unsupported"):
            def refuse(*args: Any) -> Any:
                raise nvml_error("NVML_ERROR_NOT_SUPPORTED")
            return refuse
        return object.__getattribute__(self, name)


class AbsentNvml(ReplayNvml):
    """nvmlInit fails the way it does without the library or without a loaded driver."""

    def __init__(self, trace: Trace, error: str) -> None:
        super().__init__(trace)
        self.error = error

    def nvmlInit(self) -> None:
        raise nvml_error(self.error)


@dataclass(frozen=True)
class _MigHandle:
    parent: int
    slot: int


class MigNvml(ReplayNvml):
    """GPU 0 in MIG mode with two instances; NVML has no utilization for it then."""

    # slot -> (GPU instance id, profile, used bytes, total bytes)
    INSTANCES: ClassVar[dict[int, tuple[str, str, int, int]]] = {
        0: ("1", "3g.71gb", 40_000_000_000, 76_235_669_504),
        1: ("2", "4g.71gb", 0, 76_235_669_504),
    }

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, slot: int) -> _MigHandle:
        if slot not in self.INSTANCES:
            raise nvml_error("NVML_ERROR_NOT_FOUND")
        return _MigHandle(handle, slot)

    def nvmlDeviceGetGpuInstanceId(self, handle: _MigHandle) -> int:
        return int(self.INSTANCES[handle.slot][0])

    def nvmlDeviceGetName(self, handle: Any) -> str:
        if isinstance(handle, _MigHandle):
            return f"{self.trace.name} MIG {self.INSTANCES[handle.slot][1]}"
        return super().nvmlDeviceGetName(handle)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> SimpleNamespace:
        if isinstance(handle, _MigHandle):
            _, _, used, total = self.INSTANCES[handle.slot]
            return SimpleNamespace(used=used, total=total, free=total - used)
        return super().nvmlDeviceGetMemoryInfo(handle, version)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        raise nvml_error("NVML_ERROR_NOT_SUPPORTED")


# -- GPU health ---------------------------------------------------------------------------------

HEALTHY = (("ecc_uncorrected", 0.0), ("ecc_corrected", 0.0), ("remapped_correctable", 0.0),
           ("remapped_uncorrectable", 0.0), ("remap_pending", 0.0), ("remap_failed", 0.0), ("pcie_replay", 0.0))


def health_trace(*events: HealthEvent) -> Trace:
    """The H200 recording with its health fields (all 0) and the given events."""
    return replace(h200_trace(), health=HEALTHY, events=events)


class FailingCalls(ReplayNvml):
    """The listed calls raise the listed NVML error (by name)."""

    def __init__(self, trace: Trace, clock: Callable[[], float], failing: dict[str, str]) -> None:
        super().__init__(trace, clock)
        self.failing = failing

    def __getattribute__(self, name: str) -> Any:
        failing = object.__getattribute__(self, "failing") if name != "failing" else {}
        if name in failing:
            def fail(*args: Any) -> Any:
                raise nvml_error(failing[name])
            return fail
        return object.__getattribute__(self, name)


class NvLinkNvml(ReplayNvml):
    """An SXM board with LINKS NVLinks, link 2 down; per-link error counts in `link_errors`."""

    LINKS = 4

    def __init__(self, trace: Trace, clock: Callable[[], float]) -> None:
        super().__init__(trace, clock)
        self.link_errors: dict[tuple[int, int], int] = {}

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        self._check(handle)
        if link >= self.LINKS:
            raise nvml_error("NVML_ERROR_INVALID_ARGUMENT")
        return int(pynvml.NVML_FEATURE_DISABLED if link == 2 else pynvml.NVML_FEATURE_ENABLED)

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: int, link: int, counter: int) -> int:
        self._check(handle)
        return self.link_errors.get((link, counter), 0)


class RetiringNvml(ReplayNvml):
    """A Volta-like GPU: page retirement instead of row remapping (which answers NOT_SUPPORTED)."""

    def __init__(self, trace: Trace, clock: Callable[[], float], sbe: int, dbe: int, pending: int) -> None:
        super().__init__(trace, clock)
        self.pages = {pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: sbe,
                      pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: dbe}
        self.pending = pending

    def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> list[int]:
        self._check(handle)
        return [0x7F0000 + 0x1000 * page for page in range(self.pages[cause])]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        self._check(handle)
        return self.pending

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        self._check(handle)
        raise nvml_error("NVML_ERROR_NOT_SUPPORTED")


class StuckEvents(ReplayNvml):
    """nvmlEventSetWait_v2 blocks (a wedged driver) until `release` is set."""

    def __init__(self, trace: Trace, clock: Callable[[], float]) -> None:
        super().__init__(trace, clock)
        self.release = threading.Event()
        self.waiting = threading.Event()

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        self.waiting.set()
        self.release.wait(60)  # a bound, so a broken test cannot keep a thread forever
        raise nvml_error("NVML_ERROR_TIMEOUT")
