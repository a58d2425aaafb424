"""dcgm-exporter pages (4.8 fixture, 4.9 page) served by a real loopback server -> our names."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from monitor.infra.dcgm import DCGM_FIELDS, TO_BASE, WANTED, page_to_states
from monitor.promtext import parse
from monitor.runtime import Monitor
from tests.conftest import FIXTURES
from tests.infra.conftest import infra_settings, tick
from tests.infra.scrape import Samples, names, series, value
from tests.support.pageserver import Page, PageServer, status_page

MIB = 1048576
PAGE_48 = (FIXTURES / "sample_dcgm.prom").read_text()
PAGE_49 = (FIXTURES / "dcgm_4_9.prom").read_text()
N1 = {"node": "gpu-node-01"}
N2 = {"node": "gpu-node-02"}


@pytest.fixture
def server() -> Iterator[PageServer]:
    with PageServer() as running:
        yield running


def scrape(server: PageServer, pages: dict[str, str], between: Any = None) -> list[Samples]:
    """Serve each page at /<name>, point one dcgm target at each, tick once (twice with `between`)."""
    targets = [{"name": name, "url": server.set(f"/{name}", Page(text))} for name, text in pages.items()]
    monitor = Monitor(infra_settings(nvml={"enabled": "false"}, dcgm={"targets": targets}))

    async def run() -> list[Samples]:
        try:
            out = [await tick(monitor)]
            if between is not None:
                between()
                out.append(await tick(monitor))
            return out
        finally:
            await monitor.aclose()

    return asyncio.run(run())


def test_dcgm_4_8_page_in_base_units(server: PageServer) -> None:
    (page,) = scrape(server, {"dcgm-a": PAGE_48})
    gpu0, gpu1 = {**N1, "gpu": "0"}, {**N1, "gpu": "1"}
    assert value(page, "inference_gpu_up", **gpu0) == value(page, "inference_gpu_up", **gpu1) == 1.0
    # Utilization: the graphics engine's active ratio is preferred over "a kernel ran" (87 %).
    assert value(page, "inference_gpu_utilization_ratio", **gpu0) == 0.846213
    assert value(page, "inference_gpu_graphics_engine_active_ratio", **gpu0) == 0.846213
    assert value(page, "inference_gpu_kernel_active_ratio", **gpu0) == 0.87
    assert value(page, "inference_gpu_memory_used_bytes", **gpu0) == 74931 * MIB == 78_570_848_256
    assert value(page, "inference_gpu_memory_reserved_bytes", **gpu0) == 546 * MIB
    assert value(page, "inference_gpu_memory_total_bytes", **gpu0) == (74931 + 5842 + 546) * MIB
    assert value(page, "inference_gpu_memory_used_ratio", **gpu0) == 74931 / (74931 + 5842 + 546)
    assert value(page, "inference_gpu_temperature_celsius", **gpu0) == 64.0
    assert value(page, "inference_gpu_power_watts", **gpu0) == 512.338
    assert value(page, "inference_gpu_energy_joules_total", **gpu0) == 4_821_930_551.203
    assert value(page, "inference_gpu_sm_clock_hertz", **gpu0) == 1_980_000_000.0
    assert series(page, "inference_gpu_info", **gpu0) == [
        {**gpu0, "uuid": "GPU-3f1c2a9e-7b44-4d0e-9a51-1c2d3e4f5a6b", "model": "NVIDIA H100 80GB HBM3",
         "driver": "570.133.20"}]
    assert series(page, "inference_gpu_workload_info", **gpu0) == [
        {**gpu0, "pod": "vllm-llama-7d9f8c6b5-x2kqp", "namespace": "inference", "container": "vllm"}]
    # Not on a default 4.8 page: absent, never 0.
    for absent in ("inference_gpu_power_limit_watts", "inference_gpu_clock_event_active",
                   "inference_gpu_ecc_uncorrected_errors_total"):
        assert not series(page, absent), absent


def test_dcgm_4_8_mig_gpu(server: PageServer) -> None:
    (page,) = scrape(server, {"dcgm-a": PAGE_48})
    gpu1 = {**N1, "gpu": "1"}
    # Device-wide fields come through the instance's labels; utilization does not exist for MIG.
    assert value(page, "inference_gpu_temperature_celsius", **gpu1) == 47.0
    assert value(page, "inference_gpu_power_watts", **gpu1) == 141.902
    assert value(page, "inference_gpu_sm_clock_hertz", **gpu1) == 1_755_000_000.0
    assert not series(page, "inference_gpu_utilization_ratio", **gpu1)
    assert not series(page, "inference_gpu_memory_used_bytes", **gpu1)
    instance = {**gpu1, "gpu_instance": "1", "profile": "3g.40gb"}
    assert value(page, "inference_gpu_mig_memory_used_bytes", **instance) == 9858 * MIB
    assert value(page, "inference_gpu_mig_memory_total_bytes", **instance) == (9858 + 30122) * MIB
    assert value(page, "inference_gpu_mig_memory_used_ratio", **instance) == 9858 / (9858 + 30122)
    assert len(series(page, "inference_gpu_mig_memory_used_bytes")) == 1  # instance 2 reports no memory


def test_memory_copy_utilization_is_never_memory_usage(server: PageServer) -> None:
    pages = scrape(server, {"dcgm-a": PAGE_48, "dcgm-b": PAGE_49})
    gpu_values = {v for (name, _), v in pages[0].items() if name.startswith("inference_gpu_")}
    assert 0.41 not in gpu_values and 41.0 not in gpu_values  # MEM_COPY_UTIL, MEMORY_UTIL_RATIO
    for name in ("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_MEMORY_UTIL_RATIO"):
        assert name not in WANTED


def test_dcgm_4_9_page_in_base_units(server: PageServer) -> None:
    (page,) = scrape(server, {"dcgm-b": PAGE_49})
    gpu0 = {**N2, "gpu": "0"}
    assert value(page, "inference_gpu_utilization_ratio", **gpu0) == 0.612345
    assert value(page, "inference_gpu_kernel_active_ratio", **gpu0) == 0.87
    assert value(page, "inference_gpu_memory_used_bytes", **gpu0) == 139_586_437_120
    assert value(page, "inference_gpu_memory_total_bytes", **gpu0) == 150_754_820_096
    assert value(page, "inference_gpu_memory_reserved_bytes", **gpu0) == 572_522_496
    assert value(page, "inference_gpu_memory_used_ratio", **gpu0) == 139_586_437_120 / 150_754_820_096
    assert value(page, "inference_gpu_temperature_celsius", **gpu0) == 67.0
    assert value(page, "inference_gpu_power_watts", **gpu0) == 612.504
    assert value(page, "inference_gpu_power_limit_watts", **gpu0) == 700.0
    assert value(page, "inference_gpu_energy_joules_total", **gpu0) == 9_876_543.0
    assert value(page, "inference_gpu_sm_clock_hertz", **gpu0) == 1_755_000_000.0
    assert value(page, "inference_gpu_clock_event_active", **gpu0, reason="sw_power_cap") == 1.0
    assert value(page, "inference_gpu_clock_event_active", **gpu0, reason="hw_thermal") == 0.0
    assert value(page, "inference_gpu_ecc_uncorrected_errors_total", **gpu0) == 0.0
    assert series(page, "inference_gpu_info", **gpu0)[0]["driver"] == "580.159.04"  # the 4.9 label name
    gpu1 = {**N2, "gpu": "1"}
    assert value(page, "inference_gpu_ecc_uncorrected_errors_total", **gpu1) == 2.0
    assert value(page, "inference_gpu_clock_event_active", **gpu1, reason="gpu_idle") == 1.0
    one = {**gpu1, "gpu_instance": "1", "profile": "3g.71gb"}
    assert value(page, "inference_gpu_mig_memory_used_bytes", **one) == 40_000_000_000
    assert value(page, "inference_gpu_mig_memory_total_bytes", **one) == 76_235_669_504
    assert series(page, "inference_gpu_workload_info", **gpu1) == [
        {**gpu1, "gpu_instance": "1", "pod": "sglang-llama-6c5b4a3f2-k8pqz", "namespace": "inference",
         "container": "sglang"}]


def test_a_failed_scrape_takes_its_gpus_down(server: PageServer) -> None:
    before, after = scrape(server, {"dcgm-a": PAGE_48}, lambda: server.set("/dcgm-a", status_page(500)))
    assert value(before, "inference_monitor_collector_success", collector="infra", target="dcgm-a") == 1.0
    assert value(after, "inference_monitor_collector_success", collector="infra", target="dcgm-a") == 0.0
    for gpu in ("0", "1"):
        assert value(after, "inference_gpu_up", **N1, gpu=gpu) == 0.0
    # Identity and the XIDs counted stay; every reading goes. The page showed XID 31 on GPU 1 twice in
    # the exporter's window (DCGM_EXP_XID_ERRORS_COUNT), which wins over its last-XID gauge.
    assert names(after) == {"inference_gpu_up", "inference_gpu_info", "inference_gpu_xid_errors_total",
                            "inference_gpu_xid_events"}
    assert value(after, "inference_gpu_xid_errors_total", **N1, gpu="1", xid="31") == 2.0


def test_old_hostname_label_and_no_hostname() -> None:
    old = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",modelName="L40S",Hostname="old-node"} 40\n'
    bare = 'DCGM_FI_DEV_GPU_TEMP{gpu="3",UUID="GPU-b",modelName="L40S"} 41\n'
    (first,) = page_to_states(parse(old, WANTED), "target-x")
    (second,) = page_to_states(parse(bare, WANTED), "target-x")
    assert (first.node, first.gpu) == ("old-node", "0")
    assert (second.node, second.gpu) == ("target-x", "3")  # the target's name stands in for the node


def test_both_generations_on_one_page_prefer_base_units() -> None:
    text = ('DCGM_FI_DEV_SM_CLOCK{gpu="0"} 1400\nDCGM_FI_DEV_SM_CLOCK_HERTZ{gpu="0"} 1410000000\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 50\n')
    (state,) = page_to_states(parse(text, WANTED), "t")
    assert state.reading is not None
    assert state.reading.sm_clock_hertz == 1_410_000_000 and state.reading.kernel_active_ratio == 0.5


def test_every_legacy_name_has_a_base_unit_name() -> None:
    by_generation: dict[str, set[str]] = {}
    for field in DCGM_FIELDS:
        by_generation.setdefault(field.generation, set()).add(field.attribute)
        assert field.unit in TO_BASE
    # Not renamed by DCGM 4.7 (the same name in both generations' CSVs).
    assert by_generation["4.8"] - by_generation["4.9"] == {"ecc_uncorrected_errors", "ecc_corrected_errors",
                                                           "row_remap_pending"}
    assert all(f.unit == "base" for f in DCGM_FIELDS if f.generation == "4.9")


def test_a_gpu_that_vanishes_from_the_page_is_down(server: PageServer) -> None:
    only_gpu0 = "\n".join(line for line in PAGE_48.splitlines() if 'gpu="1"' not in line) + "\n"
    before, after = scrape(server, {"dcgm-a": PAGE_48}, lambda: server.set("/dcgm-a", Page(only_gpu0)))
    assert value(before, "inference_gpu_up", **N1, gpu="1") == 1.0
    assert value(after, "inference_gpu_up", **N1, gpu="1") == 0.0
    assert value(after, "inference_gpu_up", **N1, gpu="0") == 1.0
    assert not series(after, "inference_gpu_temperature_celsius", **N1, gpu="1")


def test_health_fields_in_both_generations_names() -> None:
    """DCGM 4.7 renamed the health fields (dcgm_fields.h 202, 230, 390-396, the NVLink totals);
    dcgm-exporter's CSV keeps the old names. Either spelling gives the same reading; a field not on
    the page stays None (absent), never 0."""
    new = {"DCGM_FI_DEV_XID_ERROR": 79, "DCGM_FI_DEV_PCIE_REPLAY_TOTAL": 12,
           "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL": 3, "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL": 5,
           "DCGM_FI_DEV_ROW_REMAP_FAILED": 1, "DCGM_FI_DEV_ROW_REMAP_PENDING": 0,
           "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL": 2, "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL": 1,
           "DCGM_FI_DEV_PAGE_RETIRED_PENDING": 1, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL": 7,
           "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL": 8, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL": 9,
           "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL": 10, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 4,
           "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 6}
    old = {"DCGM_FI_DEV_XID_ERRORS": 79, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 12,
           "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 3, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 5,
           "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1, "DCGM_FI_DEV_ROW_REMAP_PENDING": 0,
           "DCGM_FI_DEV_RETIRED_SBE": 2, "DCGM_FI_DEV_RETIRED_DBE": 1, "DCGM_FI_DEV_RETIRED_PENDING": 1,
           "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 7, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 8,
           "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 9, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 10,
           "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 4, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 6}
    readings = []
    for spelling in (new, old):
        text = "".join(f'{name}{{gpu="0",UUID="GPU-a",Hostname="n"}} {value}\n' for name, value in spelling.items())
        (state,) = page_to_states(parse(text, WANTED), "t")
        assert state.reading is not None
        readings.append(state.reading)
    assert readings[0] == readings[1]
    r = readings[0]
    assert (r.xid_last, r.pcie_replay_errors, r.row_remap_uncorrectable_rows,
            r.row_remap_correctable_rows) == (79, 12, 3, 5)
    assert (r.row_remap_failed, r.row_remap_pending, r.retired_pages, r.retired_pages_pending) == (1, 0, 3, 1)
    assert (r.nvlink_crc_flit_errors, r.nvlink_crc_data_errors, r.nvlink_replay_errors,
            r.nvlink_recovery_errors, r.ecc_corrected_errors, r.ecc_uncorrected_errors) == (7, 8, 9, 10, 4, 6)
    (bare,) = page_to_states(parse('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\n', WANTED), "t")
    assert bare.reading is not None and bare.reading.row_remap_pending is None and bare.reading.xid_last is None
