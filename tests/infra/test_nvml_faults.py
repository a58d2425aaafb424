"""Errors are states, not zeros: lost GPUs, unsupported fields, no NVML at all."""

from __future__ import annotations

import asyncio
import re
import threading
from typing import Any

import pytest

from monitor.config import ConfigError, load_settings
from monitor.runtime import Monitor
from tests.infra.conftest import nvml_monitor, tick
from tests.infra.fakes import AbsentNvml, FakeClock, HangingInit, LosableNvml, UnsupportedNvml, h200_trace
from tests.infra.scrape import Samples, names, series, value

GPU = {"node": "node-a", "gpu": "0"}
SELF = ("inference_monitor_collector_success", "inference_monitor_collector_duration_seconds",
        "inference_monitor_last_success_timestamp_seconds")


def run_ticks(monitor: Monitor, between: list[Any]) -> list[Samples]:
    """A tick, then for each callable in `between`: call it, tick again."""

    async def run() -> list[Samples]:
        try:
            pages = [await tick(monitor)]
            for action in between:
                action()
                pages.append(await tick(monitor))
            return pages
        finally:
            await monitor.aclose()

    return asyncio.run(run())


@pytest.mark.parametrize("error", ["NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN"])
def test_lost_gpu_is_down_and_its_series_disappear(error: str) -> None:
    nvml = LosableNvml(h200_trace(), FakeClock(30.0), error)
    before, after = run_ticks(nvml_monitor(nvml), [lambda: setattr(nvml, "lost", True)])
    assert value(before, "inference_gpu_up", **GPU) == 1.0
    assert value(before, "inference_gpu_temperature_celsius", **GPU) == 32.0
    assert value(after, "inference_gpu_up", **GPU) == 0.0
    # Only up and the identity remain: no frozen temperature, power or memory.
    assert names(after) == {"inference_gpu_up", "inference_gpu_info"}
    assert value(after, "inference_monitor_collector_success", collector="infra", target="0") == 0.0


def test_unsupported_fields_are_absent_not_zero() -> None:
    unsupported = {"nvmlDeviceGetTemperature", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetClockInfo",
                   "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTotalEnergyConsumption"}
    (page,) = run_ticks(nvml_monitor(UnsupportedNvml(h200_trace(), FakeClock(), unsupported)), [])
    assert value(page, "inference_gpu_up", **GPU) == 1.0
    for absent in ("inference_gpu_temperature_celsius", "inference_gpu_power_limit_watts",
                   "inference_gpu_sm_clock_hertz", "inference_gpu_clock_event_active",
                   "inference_gpu_energy_joules_total", "inference_gpu_ecc_uncorrected_errors_total"):
        assert not series(page, absent), absent
    assert value(page, "inference_gpu_power_watts", **GPU) == 83.645  # the rest still reads
    assert value(page, "inference_monitor_collector_success", collector="infra", target="0") == 1.0


def _no_infra_series(page: Samples) -> None:
    assert not names(page)
    for name in SELF:
        assert not series(page, name, collector="infra"), name


@pytest.mark.parametrize("error", ["NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED"])
def test_no_library_or_driver_is_not_present_not_a_failure(error: str) -> None:
    monitor = nvml_monitor(AbsentNvml(h200_trace(), error), enabled="auto")
    first, second = run_ticks(monitor, [lambda: None])
    for page in (first, second):
        _no_infra_series(page)
    assert value(second, "inference_slo_objective_seconds", objective="ttft") == 0.2  # other layers serve
    local = monitor.status()["layers"]["infra"]["local"]
    assert local["present"] is False and error.removeprefix("NVML_ERROR_").replace("_", "") in \
        local["absent_reason"].upper().replace("_", "")
    assert monitor.health.get("infra", "nvml").present is False


def test_pynvml_that_cannot_be_imported_is_not_present() -> None:
    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    monitor = Monitor(load_settings(None, {"infra": {"node": "node-a"}}), load_nvml=missing)
    (page,) = run_ticks(monitor, [])
    _no_infra_series(page)
    assert "pynvml cannot be imported" in monitor.status()["layers"]["infra"]["local"]["absent_reason"]


def test_nvml_required_but_absent_is_a_failure() -> None:
    (page,) = run_ticks(nvml_monitor(AbsentNvml(h200_trace(), "NVML_ERROR_LIBRARY_NOT_FOUND"), enabled="true"), [])
    assert value(page, "inference_monitor_collector_success", collector="infra", target="nvml") == 0.0


def test_nvml_disabled_reads_nothing() -> None:
    def never() -> Any:
        raise AssertionError("NVML must not be loaded when infra.nvml.enabled is false")

    monitor = Monitor(load_settings(None, {"infra": {"nvml": {"enabled": False}}}), load_nvml=never)
    (page,) = run_ticks(monitor, [])
    _no_infra_series(page)


def test_a_hung_nvml_init_fails_the_tick_and_is_not_retried_while_stuck() -> None:
    nvml = HangingInit(h200_trace(), FakeClock())
    monitor = nvml_monitor(nvml)
    entry = monitor.health.get("infra", "nvml")
    errors: list[str | None] = []
    try:
        pages = run_ticks(monitor, [lambda: errors.append(entry.error)] * 3)
        errors.append(entry.error)
        threads = [t.name for t in threading.enumerate()].count("infermon-nvml")
    finally:
        nvml.release.set()
    assert all(value(p, "inference_monitor_collector_success", collector="infra", target="nvml") == 0.0
               for p in pages)
    assert errors == ["timed out after 0.3s"] + ["previous call still blocked"] * 3
    assert entry.duration_seconds is not None and entry.duration_seconds < 0.25  # no second 0.3 s wait
    assert threads == 1


def test_a_gpu_lost_before_start_is_listed_down() -> None:
    nvml = LosableNvml(h200_trace(), FakeClock())
    nvml.lost = True  # every per-GPU call fails from the start; the count still says 1
    (page,) = run_ticks(nvml_monitor(nvml), [])
    assert value(page, "inference_gpu_up", **GPU) == 0.0
    assert names(page) == {"inference_gpu_up"}  # nothing known about it, not even its identity


@pytest.mark.parametrize(("content", "reason"), [
    (None, "cannot read"),
    ("{not json", "not valid JSON"),
    ('{"trace": []}', "no 'trace' records"),
    ('{"trace": [{"t": 0}]}', "trace[0] lacks util_gpu"),
])
def test_a_bad_replay_file_fails_at_start_naming_the_key(tmp_path: Any, content: str | None, reason: str) -> None:
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(reason)) as caught:
        Monitor(load_settings(None, {"infra": {"replay": {"file": str(path)}}}))
    assert str(caught.value).startswith("infra.replay.file: ")
