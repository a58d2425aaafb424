"""The real H200 recording through a fake pynvml, checked on the exported /metrics page."""

from __future__ import annotations

import asyncio

from monitor.infra.replay import ReplayNvml
from tests.infra.conftest import nvml_monitor, tick
from tests.infra.fakes import FakeClock, MigNvml, h200_trace
from tests.infra.scrape import Samples, series, value

GPU = {"node": "node-a", "gpu": "0"}


def play(at: list[float]) -> list[Samples]:
    """The /metrics page at each playback second of the trace (playback starts at 0)."""
    clock = FakeClock()

    async def run() -> list[Samples]:
        monitor = nvml_monitor(ReplayNvml(h200_trace(), clock))
        pages = []
        try:
            await monitor.run_once()  # opens NVML at second 0: the playback starts there
            for second in at:
                clock.now = second
                pages.append(await tick(monitor))
        finally:
            await monitor.aclose()
        return pages

    return asyncio.run(run())


def record_at(second: float) -> dict[str, float]:
    return [r for r in h200_trace().records if r["t"] <= second][-1]


def test_utilization_goes_idle_busy_duty_cycle() -> None:
    idle, burn, duty = play([0.5, 22.5, 66.5])
    for page, expected in ((idle, 0.0), (burn, 1.0), (duty, 0.3)):
        assert value(page, "inference_gpu_utilization_ratio", **GPU) == expected
        assert value(page, "inference_gpu_kernel_active_ratio", **GPU) == expected
    assert not series(idle, "inference_gpu_graphics_engine_active_ratio")  # NVML has no such field


def test_memory_crosses_ninety_three_percent() -> None:
    before, filled = play([50.5, 51.5])
    record = record_at(51.5)
    assert value(filled, "inference_gpu_memory_used_bytes", **GPU) == record["mem_used"] == 140_249_006_080
    assert value(filled, "inference_gpu_memory_total_bytes", **GPU) == 150_754_820_096
    ratio = value(filled, "inference_gpu_memory_used_ratio", **GPU)
    assert ratio == record["mem_used"] / record["mem_total"]
    assert value(before, "inference_gpu_memory_used_ratio", **GPU) < 0.9 < 0.93 < ratio
    assert not series(filled, "inference_gpu_memory_reserved_bytes")  # not in the recording


def test_power_at_the_cap_with_sw_power_cap_active() -> None:
    (page,) = play([45.5])
    assert value(page, "inference_gpu_power_watts", **GPU) == 693.133
    assert value(page, "inference_gpu_power_limit_watts", **GPU) == 700.0
    assert value(page, "inference_gpu_clock_event_active", **GPU, reason="sw_power_cap") == 1.0
    assert value(page, "inference_gpu_clock_event_active", **GPU, reason="gpu_idle") == 0.0
    assert value(page, "inference_gpu_sm_clock_hertz", **GPU) == 1_425_000_000
    assert value(page, "inference_gpu_temperature_celsius", **GPU) == 54.0


def test_identity_energy_and_up() -> None:
    (page,) = play([0.5])
    assert value(page, "inference_gpu_up", **GPU) == 1.0
    info = series(page, "inference_gpu_info", **GPU)
    assert info == [{**GPU, "uuid": "GPU-8f2687f3-160a-5e57-a0fe-33fdb7f15852", "model": "NVIDIA H200",
                     "driver": "580.159.04"}]
    assert value(page, "inference_gpu_energy_joules_total", **GPU) == 3811.757
    assert value(page, "inference_monitor_collector_success", collector="infra", target="0") == 1.0


def test_replay_loops_and_energy_keeps_counting() -> None:
    trace = h200_trace()
    clock = FakeClock()
    nvml = ReplayNvml(trace, clock)
    nvml.nvmlInit()
    first = nvml.nvmlDeviceGetTotalEnergyConsumption(0)
    clock.now = trace.period + 0.5  # the second loop, first record
    assert nvml.nvmlDeviceGetUtilizationRates(0).gpu == trace.records[0]["util_gpu"]
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(0) > first


def test_a_second_init_goes_on_playing() -> None:
    """The monitor opens NVML again when an open overran its deadline but finished: the playback
    (and the energy counter) must go on, not restart at the recording's idle first second."""
    trace = h200_trace()
    clock = FakeClock()
    nvml = ReplayNvml(trace, clock)
    nvml.nvmlInit()
    clock.now = 22.5  # mid burn
    energy = nvml.nvmlDeviceGetTotalEnergyConsumption(0)
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetUtilizationRates(0).gpu == record_at(22.5)["util_gpu"] > 0
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(0) == energy
    nvml.restart()  # asked for (bench/gpu_check.py on a clock of its own): from the start
    assert nvml.nvmlDeviceGetUtilizationRates(0).gpu == trace.records[0]["util_gpu"]
    clock.now = 44.5
    nvml.nvmlShutdown()
    nvml.nvmlInit()  # after a shutdown: a new playback, from its start
    assert nvml.nvmlDeviceGetUtilizationRates(0).gpu == trace.records[0]["util_gpu"]


def test_mig_instances_get_memory_series_and_no_utilization() -> None:
    clock = FakeClock()

    async def run() -> Samples:
        monitor = nvml_monitor(MigNvml(h200_trace(), clock))
        try:
            await monitor.run_once()
            clock.now = 22.5
            return await tick(monitor)
        finally:
            await monitor.aclose()

    page = asyncio.run(run())
    assert not series(page, "inference_gpu_utilization_ratio")
    one = {**GPU, "gpu_instance": "1", "profile": "3g.71gb"}
    two = {**GPU, "gpu_instance": "2", "profile": "4g.71gb"}
    assert value(page, "inference_gpu_mig_memory_used_bytes", **one) == 40_000_000_000
    assert value(page, "inference_gpu_mig_memory_total_bytes", **one) == 76_235_669_504
    assert value(page, "inference_gpu_mig_memory_used_ratio", **two) == 0.0
    assert value(page, "inference_gpu_power_watts", **GPU) == 693.42  # the whole GPU still reports
