"""GPU sources and windows: a dcgm-exporter page identifies the GPUs like NVML does; energy is the
counter's difference, or power integrated when there is no counter."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from monitor.infra.reading import GpuReading
from monitor.loadtest.sampling import DcgmSource, GpuWindow, engine_figures
from monitor.promtext import Parser, parse
from monitor.service.derive import Objectives
from monitor.service.engines import detect
from monitor.service.extract import Snapshot, extract
from tests.loadtest.conftest import FIXTURES, MODEL


def test_a_dcgm_exporter_page_gives_the_gpu_conditions() -> None:
    page = (FIXTURES / "sample_dcgm.prom").read_text()
    transport = httpx.MockTransport(lambda request: httpx.Response(200, text=page))

    async def identify() -> tuple[dict[str, object], list[GpuReading]]:
        async with httpx.AsyncClient(transport=transport) as http:
            source = DcgmSource("http://dcgm:9400/metrics", http)
            return await source.identify(), await source.read()

    conditions, readings = asyncio.run(identify())
    assert conditions["source"] == "dcgm" and conditions["model"] == "NVIDIA H100 80GB HBM3"
    assert conditions["driver"] == "570.133.20"
    assert conditions["count"] == len(readings) >= 1
    assert readings[0].energy_joules == pytest.approx(4821930551203 / 1000)


def test_energy_is_the_counter_difference_summed_over_gpus() -> None:
    window = GpuWindow([(0.0, [GpuReading(energy_joules=1000.0, power_watts=300.0),
                               GpuReading(energy_joules=5000.0, power_watts=100.0)]),
                        (2.0, [GpuReading(energy_joules=1600.0, power_watts=300.0),
                               GpuReading(energy_joules=5200.0, power_watts=100.0)])])
    figures = window.figures(output_tokens=400)
    assert figures["energy_from"] == "counter" and figures["energy_joules"] == pytest.approx(800.0)
    assert figures["joules_per_output_token"] == pytest.approx(2.0)
    assert figures["power_watts"] == pytest.approx(400.0)


def test_without_a_counter_power_is_integrated_over_the_readings() -> None:
    window = GpuWindow([(0.0, [GpuReading(power_watts=100.0)]), (1.0, [GpuReading(power_watts=300.0)]),
                        (3.0, [GpuReading(power_watts=300.0)])])
    figures = window.figures(output_tokens=0)
    assert figures["energy_from"] == "power" and figures["energy_joules"] == pytest.approx(200.0 + 600.0)
    assert figures["joules_per_output_token"] is None  # no token generated: no ratio, not a division by zero


def _snapshot(name: str, ts: float) -> Snapshot:
    text = (FIXTURES / "real_engines" / name).read_text()
    spec = detect(text)
    assert spec is not None
    return extract(Parser().parse(text, spec.page_names()), spec, ts, MODEL)


def _total(name: str, sample: str) -> float:
    page = parse((FIXTURES / "real_engines" / name).read_text())
    return sum(page.series(sample).values())


def test_the_engines_numbers_over_a_window_are_the_counters_differences_on_real_vllm_pages() -> None:
    # Two scrapes of vLLM 0.33.0's own metric code, 60 s apart (tests/fixtures/real_engines/README.md).
    start, end = _snapshot("vllm-0.33.0_t0.prom", 1000.0), _snapshot("vllm-0.33.0_t60.prom", 1060.0)
    figures = engine_figures(start, end, Objectives(), MODEL)
    for figure, sample in (("requests", "vllm:request_success_total"), ("preemptions", "vllm:num_preemptions_total"),
                           ("generation_tokens", "vllm:generation_tokens_total")):
        increase = _total("vllm-0.33.0_t60.prom", sample) - _total("vllm-0.33.0_t0.prom", sample)
        assert increase > 0
        # rate() over the window plus its 2 ms margin: a series that starts at 0 is not extrapolated
        # over the margin (Prometheus' zero clamp), so the count may be short by up to 2 ms / 60 s.
        assert figures[figure] == pytest.approx(increase, rel=0.002 / 60), figure
    # TTFT cycles over 0.03 ... 0.9 s on that page: the engine's histogram quantiles lie inside.
    assert 0.03 <= figures["ttft_s"]["p50"] <= figures["ttft_s"]["p99"] <= 1.0
    assert figures["queue_s"]["p99"] > 0
