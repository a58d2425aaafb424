"""What the infra layer costs: one collection per GPU on top of NVML, and /metrics rendering.

    python -m bench.infra_collect [--gpus 64] [--nodes 8] [--repeat 200]

"Instant NVML" is a fake module whose calls return constants at once, so what is measured is
ours: the per-GPU read (≈18 NVML calls, GPU health included, + a GpuReading) and the hand-off to the GPU's worker
thread and back under a deadline. Goals: < 50 µs per GPU per tick on top of the NVML calls,
< 20 ms to render /metrics for 64 GPUs × 8 nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pynvml

from monitor.exporter import TextWriter, make_registry, render_text
from monitor.health import HealthBook
from monitor.infra.local import LocalGpus
from monitor.infra.nvml import NvmlBackend
from monitor.infra.reading import GpuIdentity, GpuReading, GpuState, InfraView
from monitor.infra.render import render_infra
from monitor.infra.worker import DeviceWorker, Inbox

_UTIL = SimpleNamespace(gpu=87, memory=30)
_MEMORY = SimpleNamespace(total=150_754_820_096, used=140_249_006_080, free=10_505_814_016, reserved=572_522_496)


class InstantNvml:
    """Every call NvmlBackend makes, answered with a constant."""

    NVMLError = pynvml.NVMLError

    def __init__(self, count: int) -> None:
        self.count = count

    def __getattr__(self, name: str) -> Any:
        return getattr(pynvml, name)  # constants only: every call used is defined below

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: return "580.159.04"
    def nvmlDeviceGetCount(self) -> int: return self.count
    def nvmlDeviceGetHandleByIndex(self, index: int) -> int: return index
    def nvmlDeviceGetUUID(self, handle: int) -> str: return f"GPU-{handle:08x}"
    def nvmlDeviceGetName(self, handle: int) -> str: return "NVIDIA H200"
    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace: return _UTIL
    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int = 0) -> SimpleNamespace: return _MEMORY
    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int: return 54
    def nvmlDeviceGetPowerUsage(self, handle: int) -> int: return 693_420
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int: return 700_000
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int: return 27_284_871
    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int: return 1425
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int: return 4
    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int: return 0
    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]: return [0, 0]
    # GPU health, as an H200 answers: row remapping (no page retirement), 18 NVLinks, XID events.
    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]: return (0, 0, 0, 0)
    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int: return 0
    def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> list[int]: raise _unsupported()
    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int: raise _unsupported()
    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        if link >= 18:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1
    def nvmlDeviceGetNvLinkErrorCounter(self, handle: int, link: int, counter: int) -> int: return 0
    def nvmlEventSetCreate(self) -> object: return object()
    def nvmlDeviceRegisterEvents(self, handle: int, types: int, event_set: object) -> None: ...
    def nvmlEventSetFree(self, event_set: object) -> None: ...
    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> None:
        time.sleep(timeout_ms / 1000.0)  # no XID: the wait times out, as the driver's does
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)


def _unsupported() -> pynvml.NVMLError:
    return pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


ROUNDS = 5  # the best of 5 medians: other processes on a small machine only ever add time


def per_call(fn: Callable[[], Any], repeat: int) -> float:
    """Seconds of one call: the lowest of ROUNDS medians over `repeat` calls."""
    medians = []
    for _ in range(ROUNDS):
        timings = []
        for _ in range(repeat):
            started = time.perf_counter()
            fn()
            timings.append(time.perf_counter() - started)
        medians.append(statistics.median(timings))
    return min(medians)


def raw_calls(nvml: InstantNvml) -> None:
    # The same NVML calls one tick makes, with nothing of ours around them.
    nvml.nvmlDeviceGetMemoryInfo(0, nvml.nvmlMemory_v2)
    nvml.nvmlDeviceGetUtilizationRates(0)
    nvml.nvmlDeviceGetPowerUsage(0)
    nvml.nvmlDeviceGetEnforcedPowerLimit(0)
    nvml.nvmlDeviceGetClockInfo(0, nvml.NVML_CLOCK_SM)
    nvml.nvmlDeviceGetTotalEccErrors(0, 1, 0)
    nvml.nvmlDeviceGetTemperature(0, 0)
    nvml.nvmlDeviceGetCurrentClocksEventReasons(0)
    nvml.nvmlDeviceGetTotalEccErrors(0, 0, 0)  # GPU health: corrected ECC, retired pages (refused), PCIe replays,
    for call in (nvml.nvmlDeviceGetRetiredPagesPendingStatus, lambda h: nvml.nvmlDeviceGetRetiredPages(h, 0),
                 lambda h: nvml.nvmlDeviceGetRetiredPages(h, 1)):
        with contextlib.suppress(pynvml.NVMLError):
            call(0)
    nvml.nvmlDeviceGetPcieReplayCounter(0)
    nvml.nvmlDeviceGetRemappedRows(0)  # the remapped rows


def bench_read(repeat: int) -> tuple[float, float]:
    nvml = InstantNvml(1)
    backend = NvmlBackend(nvml)
    backend.open()
    backend.read(0)  # the slow fields (energy, MIG mode) are read now, then every 30 s
    return per_call(lambda: raw_calls(nvml), repeat * 5), per_call(lambda: backend.read(0), repeat * 5)


def bench_tick(gpus: int, repeat: int) -> float:
    async def run() -> float:
        local = LocalGpus(NvmlBackend(InstantNvml(gpus)), "bench", HealthBook(), timeout_s=2.0)
        await local.collect()  # open + start the worker threads
        medians = []
        for _ in range(ROUNDS):
            timings = []
            for _ in range(repeat):
                started = time.perf_counter()
                states = await local.collect()
                timings.append(time.perf_counter() - started)
                assert all(s.up for s in states)
            medians.append(statistics.median(timings))
        await local.aclose()
        return min(medians)

    return asyncio.run(run())


def bench_handoff(workers: int, repeat: int) -> float:
    """One tick's hand-off alone: an empty job to each worker thread and back, per worker."""
    async def run() -> float:
        inbox = Inbox()
        pool = [DeviceWorker(f"bench-{i}", inbox=inbox) for i in range(workers)]
        medians = []
        for _ in range(ROUNDS):
            timings = []
            for _ in range(repeat):
                started = time.perf_counter()
                for future in [w.submit(_nothing, 2.0) for w in pool]:
                    await future
                timings.append(time.perf_counter() - started)
            medians.append(statistics.median(timings))
        for worker in pool:
            worker.close()
        return min(medians) / workers

    return asyncio.run(run())


def _nothing() -> None:
    return None


def fleet_view(gpus: int, nodes: int) -> InfraView:
    reading = GpuReading(kernel_active_ratio=0.87, graphics_engine_active_ratio=0.61, memory_used_bytes=1.4e11,
                         memory_total_bytes=1.5e11, memory_reserved_bytes=5.7e8, temperature_celsius=54,
                         power_watts=693.4, power_limit_watts=700, energy_joules=2.7e7, sm_clock_hertz=1.425e9,
                         clock_event_mask=4, ecc_uncorrected_errors=0)
    states = [GpuState(f"node-{n:02d}", str(g), "bench", True, GpuIdentity(g, f"GPU-{n:02d}{g:06x}", "NVIDIA H200",
                                                                          "580.159.04"), reading)
              for n in range(nodes) for g in range(gpus)]
    return InfraView(time.time(), tuple(states))


def bench_render(gpus: int, nodes: int, repeat: int) -> tuple[float, float, int]:
    view = fleet_view(gpus, nodes)
    registry = make_registry([lambda: render_infra(view)])
    families = per_call(lambda: list(render_infra(view)), repeat)
    writer = TextWriter()  # the Monitor keeps one, so label texts are cached across scrapes
    text = per_call(lambda: render_text(registry, writer), repeat)
    samples = sum(len(f.samples) for f in render_infra(view))
    return families, text, samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    raw, read = bench_read(args.repeat)
    rows = [
        ("NVML calls of one GPU tick (instant fake)", raw * 1e6, "µs"),
        ("NvmlBackend.read, one GPU", read * 1e6, "µs"),
        ("  ours on top of the calls", (read - raw) * 1e6, "µs  (goal < 50)"),
    ]
    for gpus in (1, 8, args.gpus):
        tick = bench_tick(gpus, args.repeat)
        rows.append((f"tick via worker threads, {gpus} GPUs, per GPU", tick / gpus * 1e6, "µs"))
        rows.append(("  ours on top of the calls, per GPU", (tick / gpus - raw) * 1e6, "µs  (goal < 50)"))
        rows.append(("  of which the bare thread hand-off (empty job)", bench_handoff(gpus, args.repeat) * 1e6, "µs"))
    families, text, samples = bench_render(args.gpus, args.nodes, max(10, args.repeat // 20))
    rows.append((f"render_infra, {args.gpus} GPUs x {args.nodes} nodes ({samples} samples)", families * 1e3, "ms"))
    rows.append(("  + text exposition (what /metrics does)", text * 1e3, "ms  (goal < 20)"))
    width = max(len(r[0]) for r in rows)
    for label, number, unit in rows:
        print(f"{label:<{width}}  {number:9.1f} {unit}")


if __name__ == "__main__":
    main()
