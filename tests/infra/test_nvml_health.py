"""GPU health through NVML: each field, each error code, XID events on their own thread, and a
replayed fault; all through the real NvmlBackend and the real /metrics page."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pynvml
import pytest

from monitor.config import ConfigError
from monitor.infra.replay import HealthEvent, ReplayNvml, load_trace
from monitor.runtime import Monitor
from tests.infra.conftest import nvml_monitor, tick
from tests.infra.fakes import (
    TRACE_FILE,
    FailingCalls,
    FakeClock,
    NvLinkNvml,
    RetiringNvml,
    StuckEvents,
    health_trace,
    nvml_error,
)
from tests.infra.scrape import Samples, names, series, value

GPU = {"node": "node-a", "gpu": "0"}
ROW_FIELDS = ("inference_gpu_row_remap_correctable_rows", "inference_gpu_row_remap_uncorrectable_rows",
              "inference_gpu_row_remap_pending", "inference_gpu_row_remap_failed")


def pages(monitor: Monitor, *between: Any) -> list[Samples]:
    """A tick, then for each callable: call it, tick again (waiting for what it expects, if it returns one)."""

    async def run() -> list[Samples]:
        try:
            out = [await tick(monitor)]
            for action in between:
                wanted = action()
                out.append(await tick(monitor))
                deadline = time.monotonic() + 10
                while wanted is not None and not wanted(out[-1]):
                    assert time.monotonic() < deadline, "condition not met within 10 s"
                    await asyncio.sleep(0.02)
                    out[-1] = await tick(monitor)
            return out
        finally:
            await monitor.aclose()

    return asyncio.run(run())


def test_each_health_field_is_read_in_base_units() -> None:
    clock = FakeClock()
    nvml = NvLinkNvml(health_trace(HealthEvent(10.0, 0, None, (
        ("ecc_uncorrected", 2.0), ("ecc_corrected", 17.0), ("remapped_correctable", 3.0),
        ("remapped_uncorrectable", 1.0), ("remap_pending", 1.0), ("pcie_replay", 5.0)))), clock)
    nvml.link_errors = {(0, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT): 4, (1, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT): 6,
                        (2, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT): 1000,  # link 2 is down: not counted
                        (3, pynvml.NVML_NVLINK_ERROR_DL_REPLAY): 2, (0, pynvml.NVML_NVLINK_ERROR_DL_RECOVERY): 1}
    healthy, sick = pages(nvml_monitor(nvml), lambda: setattr(clock, "now", 10.0))
    for name in (*ROW_FIELDS, "inference_gpu_ecc_uncorrected_errors_total", "inference_gpu_ecc_corrected_errors_total",
                 "inference_gpu_pcie_replay_errors_total"):
        assert value(healthy, name, **GPU) == 0.0, name  # healthy is 0, not absent
    expected = {"inference_gpu_ecc_uncorrected_errors_total": 2, "inference_gpu_ecc_corrected_errors_total": 17,
                "inference_gpu_row_remap_correctable_rows": 3, "inference_gpu_row_remap_uncorrectable_rows": 1,
                "inference_gpu_row_remap_pending": 1, "inference_gpu_row_remap_failed": 0,
                "inference_gpu_pcie_replay_errors_total": 5,
                "inference_gpu_nvlink_crc_flit_errors_total": 10, "inference_gpu_nvlink_crc_data_errors_total": 0,
                "inference_gpu_nvlink_replay_errors_total": 2, "inference_gpu_nvlink_recovery_errors_total": 1}
    assert {name: value(sick, name, **GPU) for name in expected} == expected
    # The counters' increases between the two reads, for the rules (which have no increase()).
    increase = {labels["kind"]: value(sick, "inference_gpu_errors_increase", **labels)
                for labels in series(sick, "inference_gpu_errors_increase", **GPU)}
    assert increase["ecc_uncorrected"] == 2 and increase["ecc_corrected"] == 17 and increase["pcie_replay"] == 5
    # An H200 retires no pages (row remapping replaced it): absent, not 0.
    assert not series(sick, "inference_gpu_retired_pages_sbe") and not series(sick, "inference_gpu_retired_pages")


def test_page_retirement_counts_pages_by_cause() -> None:
    nvml = RetiringNvml(health_trace(), FakeClock(), sbe=41, dbe=22, pending=1)
    (page,) = pages(nvml_monitor(nvml))
    assert value(page, "inference_gpu_retired_pages_sbe", **GPU) == 41
    assert value(page, "inference_gpu_retired_pages_dbe", **GPU) == 22
    assert value(page, "inference_gpu_retired_pages", **GPU) == 63
    assert value(page, "inference_gpu_retired_pages_pending", **GPU) == 1
    assert not any(series(page, name) for name in ROW_FIELDS)  # NOT_SUPPORTED on this GPU


HEALTH_CALLS = {
    "nvmlDeviceGetRemappedRows": ROW_FIELDS,
    "nvmlDeviceGetPcieReplayCounter": ("inference_gpu_pcie_replay_errors_total",),
    "nvmlDeviceGetTotalEccErrors": ("inference_gpu_ecc_uncorrected_errors_total",
                                    "inference_gpu_ecc_corrected_errors_total"),
}


@pytest.mark.parametrize("error", ["NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION",
                                   "NVML_ERROR_FUNCTION_NOT_FOUND"])
@pytest.mark.parametrize("call", sorted(HEALTH_CALLS))
def test_a_field_the_gpu_lacks_is_absent_and_the_rest_reads(call: str, error: str) -> None:
    (page,) = pages(nvml_monitor(FailingCalls(health_trace(), FakeClock(), {call: error})))
    assert value(page, "inference_gpu_up", **GPU) == 1.0
    for name in HEALTH_CALLS[call]:
        assert not series(page, name), name
    for other, fields in HEALTH_CALLS.items():
        if other != call:
            assert all(value(page, name, **GPU) == 0.0 for name in fields), other


@pytest.mark.parametrize("error", ["NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN"])
def test_a_health_call_that_finds_the_gpu_lost_takes_it_down(error: str) -> None:
    (page,) = pages(nvml_monitor(FailingCalls(health_trace(), FakeClock(), {"nvmlDeviceGetRemappedRows": error})))
    assert value(page, "inference_gpu_up", **GPU) == 0.0
    assert names(page) == {"inference_gpu_up", "inference_gpu_info"}


def test_nvlink_absent_on_a_pcie_card_and_when_the_counter_is_refused() -> None:
    (pcie,) = pages(nvml_monitor(ReplayNvml(health_trace(), FakeClock())))
    assert not [n for n in names(pcie) if "nvlink" in n]
    class Refused(NvLinkNvml):  # links up, their counters refused
        def nvmlDeviceGetNvLinkErrorCounter(self, handle: int, link: int, counter: int) -> int:
            raise nvml_error("NVML_ERROR_NOT_SUPPORTED")

    (page,) = pages(nvml_monitor(Refused(health_trace(), FakeClock())))
    assert not [n for n in names(page) if "nvlink" in n]


def _xid_seen(xid: str, count: float) -> Any:
    return lambda page: series(page, "inference_gpu_xid_errors_total", xid=xid) and \
        value(page, "inference_gpu_xid_errors_total", **GPU, xid=xid) == count


def _inject(nvml: ReplayNvml, xid: int, count: float) -> Any:
    """An action for `pages`: the XID now, then wait until the page counts `count` of it."""
    def action() -> Any:
        nvml.inject_xid(0, xid)
        return _xid_seen(str(xid), count)
    return action


def test_an_xid_event_is_counted_once() -> None:
    nvml = ReplayNvml(health_trace(), FakeClock())
    first, counted, again = pages(
        nvml_monitor(nvml),
        _inject(nvml, 48, 1.0), _inject(nvml, 48, 2.0))
    assert not series(first, "inference_gpu_xid_errors_total")  # no XID yet: no series
    assert value(counted, "inference_gpu_xid_events", **GPU, xid="48", window="1h") == 1.0
    assert value(again, "inference_gpu_xid_events", **GPU, xid="48", window="1h") == 2.0
    assert value(again, "inference_gpu_up", **GPU) == 1.0


def test_a_gpu_without_the_event_api_has_no_xid_series() -> None:
    nvml = FailingCalls(health_trace(), FakeClock(), {"nvmlDeviceRegisterEvents": "NVML_ERROR_NOT_SUPPORTED"})
    monitor = nvml_monitor(nvml)
    _, second = pages(monitor, lambda: nvml.inject_xid(0, 79))
    assert not series(second, "inference_gpu_xid_errors_total")
    assert value(second, "inference_gpu_up", **GPU) == 1.0


def test_a_wait_stuck_in_the_driver_blocks_neither_reads_nor_shutdown() -> None:
    nvml = StuckEvents(health_trace(), FakeClock())
    monitor = nvml_monitor(nvml)
    started = time.monotonic()
    _, second = pages(monitor, lambda: None)
    assert nvml.waiting.is_set()
    assert value(second, "inference_gpu_up", **GPU) == 1.0
    assert time.monotonic() - started < 10  # close() gave up on the stuck thread after its bound
    nvml.release.set()


def test_a_replayed_fault_reaches_the_page(tmp_path: Any) -> None:
    data = json.loads(TRACE_FILE.read_text())
    data["health"] = dict(health_trace().health or ())
    data["events"] = [{"t": 20.0, "gpu": 0, "xid": 48,
                       "set": {"ecc_uncorrected": 1, "remapped_uncorrectable": 1, "remap_pending": 1}}]
    path = tmp_path / "fault.json"
    path.write_text(json.dumps(data))
    clock = FakeClock()
    nvml = ReplayNvml(load_trace(path), clock)
    def fault_time() -> Any:
        clock.now = 21.0
        return _xid_seen("48", 1.0)

    before, after = pages(nvml_monitor(nvml), fault_time)
    assert value(before, "inference_gpu_row_remap_pending", **GPU) == 0.0
    assert value(after, "inference_gpu_row_remap_pending", **GPU) == 1.0
    assert value(after, "inference_gpu_ecc_uncorrected_errors_total", **GPU) == 1.0
    assert value(after, "inference_gpu_xid_events", **GPU, xid="48", window="1h") == 1.0


@pytest.mark.parametrize(("change", "message"), [
    ({"health": {"ecc": 1}}, "unknown field(s) ecc"),
    ({"health": {"ecc_corrected": -1}}, "must be numbers >= 0"),
    ({"events": [{"xid": 48}]}, "needs a number 't'"),
    ({"events": [{"t": 1, "xid": "48"}]}, "'xid' must be a positive integer"),
    ({"events": [{"t": 1, "set": {"remap_pending": 1}}]}, "the trace has no 'health'"),
])
def test_a_bad_health_section_fails_at_start_naming_it(tmp_path: Any, change: dict[str, Any], message: str) -> None:
    data = {**json.loads(TRACE_FILE.read_text()), **change}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_trace(path)

