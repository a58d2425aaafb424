"""bench/scale.py end to end at a toy size: the monitor and the real Prometheus with the generated
rules scrape the same multi-model pages and both see every target and every model (the numbers
themselves belong to the bench, on a quiet machine: docs/performance.md)."""

from __future__ import annotations

import argparse
import re
import shutil

import pytest

from bench.pages import fleet_page
from bench.scale import report, run

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the Debian prometheus")


def test_a_page_of_n_models_carries_every_family_once_per_model() -> None:
    page = fleet_page(engines=1, models=10)
    models = set(re.findall(r'model_name="([^"]+)"', page))
    assert models == {f"org/model-{i}" for i in range(10)}
    running = [line for line in page.splitlines() if line.startswith("vllm:num_requests_running{")]
    assert len(running) == 10 and all('engine="0"' in line for line in running)


@pytest.mark.long
def test_the_scale_bench_runs_both_sides_on_multi_model_pages() -> None:
    args = argparse.Namespace(targets=3, models=2, interval=1, seconds=14.0, warmup=8.0, processes=1,
                              alone=False, parse_workers=0, reads=0)
    result = run(args)
    assert result["up"] == {"infermon": 3, "prometheus": 3}
    # Per target, model and window: the monitor's requests/s series and the recording rules' agree.
    assert result["series"]["infermon"] == result["series"]["prometheus"] > 0
    assert result["models"] == 2 and result["page_bytes"] > 55_000
    text = report(result)
    assert text.startswith("3 targets at 1 s (2 model(s) a page")
    assert "ratios: CPU" in text and "RSS" in text


@pytest.mark.long
def test_the_scale_bench_alone_runs_the_monitor_without_prometheus() -> None:
    # Where one process stops keeping up is measured without Prometheus taking the same cores.
    # With parse workers, their CPU and memory count as the monitor's.
    args = argparse.Namespace(targets=3, models=1, interval=1, seconds=12.0, warmup=6.0, processes=1, alone=True,
                              parse_workers=2, reads=2)
    result = run(args)
    assert result["up"] == {"infermon": 3} and "prometheus" not in result["cpu"]
    assert result["series"]["infermon"] > 0 and result["rule_eval_s"] is None
    processes = result["infermon_processes"]
    assert len(processes) == 3 and all(share > 0 and size > 10 * 2**20 for share, size in processes)
    assert result["cpu"]["infermon"] == pytest.approx(sum(share for share, _ in processes))
    assert result["rss"]["infermon"] == sum(size for _, size in processes)
    text = report(result)
    assert "the monitor alone (--alone)" in text.splitlines()[0]
    assert "ratios: CPU" not in text and "targets up" in text and "each parse worker" in text
    # What an operator opens, timed with /healthz probed meanwhile.
    assert set(result["reads"]) == {"/api/v1/status", "/", "/api/v1/alerts"}
    assert all(read["bytes"] > 0 and read["seconds"] > 0 and read["healthz_max"] > 0
               for read in result["reads"].values())
    assert "read /api/v1/status: " in text


@pytest.mark.long
def test_the_two_sides_apart_give_ratios_and_say_when_prometheus_fell_behind() -> None:
    # bench.scale_apart: the monitor alone, then Prometheus with the rules alone, on the same pages.
    from bench.scale_apart import report as apart_report
    from bench.scale_apart import run_prometheus

    args = argparse.Namespace(targets=3, models=2, interval=1, seconds=12.0, warmup=6.0, processes=1,
                              alone=True, parse_workers=0, reads=0)
    monitor = run(args)
    prometheus = run_prometheus(args)
    assert monitor["up"] == {"infermon": 3} and prometheus["up"] == 3
    assert prometheus["series"] == monitor["series"]["infermon"] > 0
    assert prometheus["cpu"] > 0 and prometheus["rss"] > 10 * 2**20 and prometheus["rule_eval_s"] > 0
    assert prometheus["missed"] >= 0
    text = apart_report(monitor, prometheus)
    assert "then Prometheus + the recording rules alone, the same 3 targets" in text
    assert "ratios: CPU" in text and "RSS" in text
    # When its rule groups miss iterations, its CPU is only a floor of what it wanted.
    behind = apart_report(monitor, {**prometheus, "missed": 4})
    assert "CPU at most" in behind and "did not keep up" in behind
    assert "CPU at most" not in apart_report(monitor, {**prometheus, "missed": 0})
