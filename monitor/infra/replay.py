"""A recorded NVML trace played as a live GPU: a pynvml-compatible module for `NvmlBackend`.

The demo (`infra.replay.file`) and the tests drive the real NVML code path with it, so what
they show is what a real H200 produced. Trace format (tests/fixtures/nvml_h200_trace.json):

    {"name": "NVIDIA H200", "uuid": "GPU-…", "driver": "580.159.04",
     "trace": [{"t": 0.0, "util_gpu": 0, "util_mem": 0, "mem_used": 644939776,
                "mem_total": 150754820096, "temp": 32, "power_mw": 83645,
                "power_limit_mw": 700000, "energy_mj": 3811757, "clock_sm": 825,
                "throttle": 1, "nproc": 0}, …]}

Playback starts at the first nvmlInit (a second one, before nvmlShutdown, goes on playing) and
loops; energy keeps counting up across loops (a counter).
Fields the recording lacks (reserved memory, ECC) answer NotSupported, as the GPU would for
fields it does not have — the replay never invents a number.

GPU health is optional, so a fault can be replayed. `"health"` holds the healthy GPU's health
fields (any of HEALTH_FIELDS; those it lacks stay NotSupported), `"events"` what happens to it
once, at `t` seconds into the first loop, on GPU `gpu` (default 0): an XID (delivered through the
event API, as the driver does) and new values for health fields:

    "health": {"ecc_uncorrected": 0, "ecc_corrected": 0, "remapped_correctable": 0,
               "remapped_uncorrectable": 0, "remap_pending": 0, "remap_failed": 0, "pcie_replay": 0},
    "events": [{"t": 20.0, "gpu": 0, "xid": 48,
                "set": {"ecc_uncorrected": 1, "remapped_uncorrectable": 1, "remap_pending": 1}}]
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from monitor.config import ConfigError

_FIELDS = ("t", "util_gpu", "util_mem", "mem_used", "mem_total", "temp", "power_mw", "power_limit_mw",
           "energy_mj", "clock_sm", "throttle")
HEALTH_FIELDS = ("ecc_uncorrected", "ecc_corrected", "remapped_correctable", "remapped_uncorrectable",
                 "remap_pending", "remap_failed", "pcie_replay")


@dataclass(frozen=True)
class HealthEvent:
    t: float
    gpu: int = 0
    xid: int | None = None
    values: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Trace:
    name: str
    uuid: str
    driver: str
    records: tuple[dict[str, float], ...]
    health: tuple[tuple[str, float], ...] | None = None  # None: no health fields recorded
    events: tuple[HealthEvent, ...] = ()

    @property
    def times(self) -> list[float]:
        return [r["t"] for r in self.records]

    @property
    def period(self) -> float:
        # One loop lasts the recording plus one typical step, so the last record gets its turn.
        times = self.times
        step = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0
        return times[-1] - times[0] + step


def load_trace(path: str | Path) -> Trace:
    """Read and check a trace; a bad file fails at start-up, naming the key and the reason."""
    where = f"infra.replay.file: {path}"
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"{where}: not valid JSON: {exc}") from None
    records = data.get("trace") if isinstance(data, dict) else None
    if not records:
        raise ConfigError(f"{where}: no 'trace' records")
    for number, record in enumerate(records):
        missing = [name for name in _FIELDS if not isinstance(record.get(name), int | float)]
        if missing:
            raise ConfigError(f"{where}: trace[{number}] lacks {', '.join(missing)}")
    health, events = _health(data, where)
    return Trace(str(data.get("name", "replayed GPU")), str(data.get("uuid", "GPU-replay")),
                 str(data.get("driver", "replay")), tuple(sorted(records, key=lambda r: r["t"])), health, events)


def _health(data: dict[str, Any], where: str) -> tuple[tuple[tuple[str, float], ...] | None, tuple[HealthEvent, ...]]:
    health = data.get("health")
    if health is not None:
        health = tuple(_health_values(health, f"{where}: health"))
    events = []
    for number, event in enumerate(data.get("events") or ()):
        at = f"{where}: events[{number}]"
        if not isinstance(event, dict) or not isinstance(event.get("t"), int | float):
            raise ConfigError(f"{at}: needs a number 't'")
        xid, gpu = event.get("xid"), event.get("gpu", 0)
        if xid is not None and (not isinstance(xid, int) or xid <= 0):
            raise ConfigError(f"{at}: 'xid' must be a positive integer")
        if not isinstance(gpu, int) or gpu < 0:
            raise ConfigError(f"{at}: 'gpu' must be a GPU index")
        values = tuple(_health_values(event.get("set") or {}, f"{at}: set"))
        if values and health is None:
            raise ConfigError(f"{at}: sets health fields, but the trace has no 'health'")
        events.append(HealthEvent(float(event["t"]), gpu, xid, values))
    return health, tuple(sorted(events, key=lambda e: e.t))


def _health_values(values: object, where: str) -> list[tuple[str, float]]:
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: must be a mapping of {', '.join(HEALTH_FIELDS)}")
    unknown = sorted(set(values) - set(HEALTH_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(HEALTH_FIELDS)})")
    bad = [name for name, value in values.items() if not isinstance(value, int | float) or value < 0]
    if bad:
        raise ConfigError(f"{where}: {', '.join(bad)} must be numbers >= 0")
    return [(name, float(value)) for name, value in values.items()]


def _error(name: str) -> pynvml.NVMLError:
    return pynvml.NVMLError(getattr(pynvml, name))


class ReplayNvml:
    """The subset of pynvml that `NvmlBackend` calls, answering from a trace.

    `count` GPUs all play the same recording (for multi-GPU demos and benchmarks). Setting
    `lost` makes every GPU answer NVML_ERROR_GPU_IS_LOST, as one that fell off the bus does.
    """

    NVMLError = pynvml.NVMLError

    def __init__(self, trace: Trace, clock: Callable[[], float] = time.monotonic, count: int = 1) -> None:
        self.trace = trace
        self.clock = clock
        self.count = count
        self._times = trace.times
        self._started: float | None = None
        self.lost = False
        self._delivered = 0  # trace events whose XID the event API has handed out
        self._injected: list[tuple[int, int]] = []  # (gpu, xid) from inject_xid, not yet handed out
        self._registered: set[int] = set()
        self._events_lock = threading.Lock()
        self._injected_health: dict[int, dict[str, float]] = {}  # GPU -> fields set by inject_fault

    def __getattr__(self, name: str) -> Any:
        # Constants (NVML_CLOCK_SM, NVML_ERROR_*, nvmlMemory_v2, …) are the real module's.
        if name.startswith(("NVML_", "nvmlMemory_v", "nvmlClocks", "nvmlEventType")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- where the playback is -------------------------------------------------------------

    def record(self) -> tuple[dict[str, float], int]:
        """The record playing now and how many loops came before it."""
        if self._started is None:
            raise _error("NVML_ERROR_UNINITIALIZED")
        elapsed = self.clock() - self._started
        loops, position = divmod(elapsed, self.trace.period)
        index = max(0, bisect.bisect_right(self._times, self._times[0] + position) - 1)
        return self.trace.records[index], int(loops)

    def _value(self, handle: int, name: str) -> float:
        self._check(handle)
        return self.record()[0][name]

    def _check(self, handle: int) -> None:
        if not isinstance(handle, int) or not 0 <= handle < self.count:
            raise _error("NVML_ERROR_INVALID_ARGUMENT")
        if self.lost:
            raise _error("NVML_ERROR_GPU_IS_LOST")

    # -- system -----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        # NVML counts its inits: a second one leaves the GPU as it is. The monitor opens again when
        # an open overran its deadline but did finish (a starved machine); restarting the playback
        # then would jump the GPU back to the recording's first second and its energy counter back.
        if self._started is None:
            self._started = self.clock()

    def nvmlShutdown(self) -> None:
        self._started = None

    def restart(self) -> None:
        """Play the recording again from its start, on the clock as it reads now (a bench that
        swapped `clock` for its own); the energy counter starts over with it."""
        if self._started is None:
            raise _error("NVML_ERROR_UNINITIALIZED")
        self._started = self.clock()

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.trace.driver

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check(index)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        self._check(handle)
        uuid = self.trace.uuid
        return uuid if handle == 0 else f"{uuid[:-4]}{handle:04x}"

    def nvmlDeviceGetName(self, handle: int) -> str:
        self._check(handle)
        return self.trace.name

    # -- readings ---------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        self._check(handle)
        record = self.record()[0]
        return SimpleNamespace(gpu=int(record["util_gpu"]), memory=int(record["util_mem"]))

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> SimpleNamespace:
        self._check(handle)
        if version is not None:
            raise _error("NVML_ERROR_NOT_SUPPORTED")  # v2 needs `reserved`, which was not recorded
        record = self.record()[0]
        used, total = int(record["mem_used"]), int(record["mem_total"])
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        return int(self._value(handle, "temp"))

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return int(self._value(handle, "power_mw"))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return int(self._value(handle, "power_limit_mw"))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        self._check(handle)
        record, loops = self.record()
        span = self.trace.records[-1]["energy_mj"] - self.trace.records[0]["energy_mj"]
        return int(record["energy_mj"] + loops * span)

    def nvmlDeviceGetClockInfo(self, handle: int, clock_type: int) -> int:
        if clock_type != pynvml.NVML_CLOCK_SM:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        return int(self._value(handle, "clock_sm"))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return int(self._value(handle, "throttle"))

    # -- health (only what the trace's "health" holds; the rest is NotSupported) ---------------

    def elapsed(self) -> float:
        if self._started is None:
            raise _error("NVML_ERROR_UNINITIALIZED")
        return self.clock() - self._started

    def health(self, handle: int, name: str) -> float:
        """A health field now: the trace's value, changed by the events due on this GPU."""
        self._check(handle)
        injected = self._injected_health.get(handle, {})
        if name in injected:
            return injected[name]
        base = dict(self.trace.health or ())
        if name not in base:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        value, elapsed = base[name], self.elapsed()
        for event in self.trace.events:
            if event.t <= elapsed and event.gpu == handle:
                value = dict(event.values).get(name, value)
        return value

    def inject_fault(self, gpu: int, xid: int | None, values: dict[str, float]) -> None:
        """A fault now (the scorecard, tests): an XID through the event API and health fields set.
        A GPU without recorded health fields gains them (at 0) with the fault."""
        unknown = set(values) - set(HEALTH_FIELDS)
        if unknown:
            raise ValueError(f"unknown health fields: {sorted(unknown)}")
        fields = self._injected_health.setdefault(gpu, {})
        for name in HEALTH_FIELDS:
            fields.setdefault(name, dict(self.trace.health or ()).get(name, 0.0))
        fields.update(values)
        if xid is not None:
            self.inject_xid(gpu, xid)

    def reset_gpu(self, gpu: int) -> None:
        """What a GPU reset does to the health fields: volatile ECC counts and pending repairs go to 0."""
        fields = self._injected_health.get(gpu)
        if fields is not None:
            fields.update(ecc_uncorrected=0.0, ecc_corrected=0.0, remap_pending=0.0)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        if counter_type != pynvml.NVML_VOLATILE_ECC:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        kind = "ecc_uncorrected" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "ecc_corrected"
        return int(self.health(handle, kind))

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        return (int(self.health(handle, "remapped_correctable")), int(self.health(handle, "remapped_uncorrectable")),
                int(self.health(handle, "remap_pending")), int(self.health(handle, "remap_failed")))

    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int:
        return int(self.health(handle, "pcie_replay"))

    def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> list[int]:
        self._check(handle)
        raise _error("NVML_ERROR_NOT_SUPPORTED")  # an H200 remaps rows; it retires no pages

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        self._check(handle)
        raise _error("NVML_ERROR_NOT_SUPPORTED")

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        self._check(handle)
        raise _error("NVML_ERROR_NOT_SUPPORTED")  # the recording is of a PCIe card

    # -- XID events ---------------------------------------------------------------------------

    def inject_xid(self, gpu: int, xid: int) -> None:
        """An XID now, as the driver would report it (tests, demos)."""
        with self._events_lock:
            self._injected.append((gpu, xid))

    def nvmlEventSetCreate(self) -> str:
        return "replay-event-set"

    def nvmlDeviceRegisterEvents(self, handle: int, event_types: int, event_set: str) -> None:
        self._check(handle)
        if not event_types & pynvml.nvmlEventTypeXidCriticalError:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        self._registered.add(handle)

    def nvmlEventSetFree(self, event_set: str) -> None:
        """A replayed event set holds nothing to free (NVML's frees its driver handle)."""

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        # Polls on the wall clock (the playback clock may be a test's): NVML blocks the same way.
        deadline = time.monotonic() + timeout_ms / 1000.0
        while True:
            event = self._next_event()
            if event is not None:
                gpu, xid = event
                return SimpleNamespace(device=gpu, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid,
                                       gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            if time.monotonic() >= deadline:
                raise _error("NVML_ERROR_TIMEOUT")
            time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))

    def _next_event(self) -> tuple[int, int] | None:
        with self._events_lock:
            if self._injected:
                return self._injected.pop(0)
            if self._started is None:
                return None
            elapsed = self.clock() - self._started
            while self._delivered < len(self.trace.events) and self.trace.events[self._delivered].t <= elapsed:
                event = self.trace.events[self._delivered]
                self._delivered += 1
                if event.xid is not None and event.gpu in self._registered:
                    return event.gpu, event.xid
        return None

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        self._check(handle)
        return [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE]
