"""A benchmark on a sick GPU says so: the GPUs' health when the run began is in the conditions
(the infra layer's verdict), and the summary and the report warn that it is not a clean run."""

from __future__ import annotations

import asyncio

import httpx

from monitor.infra.reading import GpuIdentity, GpuReading, GpuState
from monitor.loadtest.sampling import DcgmSource, health_conditions
from monitor.loadtest.summary import unhealthy
from tests.conftest import FIXTURES
from tests.support.pageserver import Page, PageServer


def test_a_dcgm_page_with_sick_gpus_makes_the_conditions_critical() -> None:
    with PageServer() as pages:
        url = pages.set("/metrics", Page((FIXTURES / "dcgm_health.prom").read_text()))

        async def identify() -> dict[str, object]:
            async with httpx.AsyncClient() as http:
                return await DcgmSource(url, http).identify()

        conditions = asyncio.run(identify())
    assert conditions["health"] == "critical"
    reasons = " ".join(conditions["health_reasons"])  # type: ignore[arg-type]
    # one page read: its flags and counts (an XID needs the ledger's history of reads: the infra layer)
    assert "GPU 0: uncorrectable ECC errors, row remap pending" in reasons and "GPU 1: row remap failed" in reasons


def _state(gpu: str, **reading: float) -> GpuState:
    return GpuState("local", gpu, "nvml", True, GpuIdentity(int(gpu), f"GPU-{gpu}", "NVIDIA H100", "580"),
                    GpuReading(**reading))  # type: ignore[arg-type]


def test_the_worst_gpu_decides_and_unknown_is_not_ok() -> None:
    assert health_conditions([_state("0", row_remap_pending=0.0, row_remap_failed=0.0)])["health"] == "ok"
    pending = health_conditions([_state("0", row_remap_pending=0.0), _state("1", row_remap_pending=1.0)])
    assert pending == {"health": "warning", "health_reasons": ["GPU 1: row remap pending"]}
    assert health_conditions([_state("0")])["health"] is None  # no health field at all: not known


def test_the_summary_warns_on_an_unclean_run() -> None:
    result = {"conditions": {"gpu": {"health": "warning", "health_reasons": ["GPU 1: row remap pending"]}},
              "levels": []}
    [line] = unhealthy(result)
    assert "not a clean benchmark" in line and "row remap pending" in line
    assert unhealthy({"conditions": {"gpu": {"health": "ok"}}, "levels": []}) == []
    assert unhealthy({"conditions": {"gpu": {"health": None}}, "levels": []}) == []
