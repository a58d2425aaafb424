"""A recorded NVML trace played as a live GPU: a pynvml-compatible module for `NvmlBackend`.

The demo (`infra.replay.file`) and the tests drive the real NVML code path with it, so what
they show is what a real H200 produced. Trace format (tests/fixtures/nvml_h200_trace.json):

    {"name": "NVIDIA H200", "uuid": "GPU-…", "driver": "580.159.04",
     "trace": [{"t": 0.0, "util_gpu": 0, "util_mem": 0, "mem_used": 644939776,
                "mem_total": 150754820096, "temp": 32, "power_mw": 83645,
                "power_limit_mw": 700000, "energy_mj": 3811757, "clock_sm": 825,
                "throttle": 1, "nproc": 0}, …]}

Playback starts at nvmlInit and loops; energy keeps counting up across loops (a counter).
Fields the recording lacks (reserved memory, ECC) answer NotSupported, as the GPU would for
fields it does not have — the replay never invents a number.
"""

from __future__ import annotations

import bisect
import json
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


@dataclass(frozen=True)
class Trace:
    name: str
    uuid: str
    driver: str
    records: tuple[dict[str, float], ...]

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
    return Trace(str(data.get("name", "replayed GPU")), str(data.get("uuid", "GPU-replay")),
                 str(data.get("driver", "replay")), tuple(sorted(records, key=lambda r: r["t"])))


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

    def __getattr__(self, name: str) -> Any:
        # Constants (NVML_CLOCK_SM, NVML_ERROR_*, nvmlMemory_v2, …) are the real module's.
        if name.startswith(("NVML_", "nvmlMemory_v", "nvmlClocks")):
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
        self._started = self.clock()

    def nvmlShutdown(self) -> None:
        self._started = None

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

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        self._check(handle)
        raise _error("NVML_ERROR_NOT_SUPPORTED")  # not in the recording

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        self._check(handle)
        return [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE]
