"""bench/scale.py end to end at a toy size: the monitor and the real Prometheus with the generated
rules scrape the same multi-model pages and both see every target and every model (the numbers
themselves belong to the bench, on a quiet machine: docs/performance.md). Each bench runs as its
operator runs it, `python -m bench.scale ... --json PATH`, and what it measured is read back."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.bench_process import run_bench
from tests.support.pages import fleet_page

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the Debian prometheus")


def test_a_page_of_n_models_carries_every_family_once_per_model() -> None:
    page = fleet_page(engines=1, models=10)
    models = set(re.findall(r'model_name="([^"]+)"', page))
    assert models == {f"org/model-{i}" for i in range(10)}
    running = [line for line in page.splitlines() if line.startswith("vllm:num_requests_running{")]
    assert len(running) == 10 and all('engine="0"' in line for line in running)


def toy_run(tmp_path: Path, bench: str, targets: int, models: int, seconds: float, warmup: float,
            parse_workers: int, reads: int, *flags: str) -> tuple[dict[str, Any], str]:
    """The bench at a toy size, 1 s intervals, one page farm process: what it measured, what it printed."""
    measured = tmp_path / f"{bench}.json"
    text = run_bench(bench, "--targets", str(targets), "--models", str(models), "--interval", "1",
                     "--seconds", str(seconds), "--warmup", str(warmup), "--processes", "1",
                     "--parse-workers", str(parse_workers), "--reads", str(reads), *flags, "--json", str(measured))
    return json.loads(measured.read_text()), text


@pytest.mark.long
def test_the_scale_bench_runs_both_sides_on_multi_model_pages(tmp_path: Path) -> None:
    result, text = toy_run(tmp_path, "scale", 3, 2, 14.0, 8.0, 0, 0)
    assert result["up"] == {"infermon": 3, "prometheus": 3}
    # Per target, model and window: the monitor's requests/s series and the recording rules' agree.
    assert result["series"]["infermon"] == result["series"]["prometheus"] > 0
    assert result["models"] == 2 and result["page_bytes"] > 55_000
    assert text.startswith("3 targets at 1 s (2 model(s) a page")
    assert "ratios: CPU" in text and "RSS" in text


@pytest.mark.long
def test_the_scale_bench_alone_runs_the_monitor_without_prometheus(tmp_path: Path) -> None:
    # Where one process stops keeping up is measured without Prometheus taking the same cores.
    # With parse workers, their CPU and memory count as the monitor's.
    result, text = toy_run(tmp_path, "scale", 3, 1, 12.0, 6.0, 2, 2, "--alone")
    assert result["up"] == {"infermon": 3} and "prometheus" not in result["cpu"]
    assert result["series"]["infermon"] > 0 and result["rule_eval_s"] is None
    processes = result["infermon_processes"]
    assert len(processes) == 3 and all(share > 0 and size > 10 * 2**20 for share, size in processes)
    assert result["cpu"]["infermon"] == pytest.approx(sum(share for share, _ in processes))
    assert result["rss"]["infermon"] == sum(size for _, size in processes)
    assert "the monitor alone (--alone)" in text.splitlines()[0]
    assert "ratios: CPU" not in text and "targets up" in text and "each parse worker" in text
    # What an operator opens, timed with /healthz probed meanwhile.
    assert set(result["reads"]) == {"/api/v1/status", "/", "/api/v1/alerts"}
    assert all(read["bytes"] > 0 and read["seconds"] > 0 and read["healthz_max"] > 0
               for read in result["reads"].values())
    assert "read /api/v1/status: " in text


@pytest.mark.long
def test_the_two_sides_apart_give_ratios_and_say_when_prometheus_fell_behind(tmp_path: Path) -> None:
    # bench.scale_apart: the monitor alone, then Prometheus with the rules alone, on the same pages.
    sides, text = toy_run(tmp_path, "scale_apart", 3, 2, 12.0, 6.0, 0, 0)
    monitor, prometheus = sides["monitor"], sides["prometheus"]

    def apart_report(prometheus: dict[str, Any]) -> str:  # the run reported again, its Prometheus side as given
        saved = tmp_path / "reported.json"
        saved.write_text(json.dumps({"monitor": monitor, "prometheus": prometheus}))
        return run_bench("scale_apart", "--report", str(saved))

    assert monitor["up"] == {"infermon": 3} and prometheus["up"] == 3
    assert prometheus["series"] == monitor["series"]["infermon"] > 0
    assert prometheus["cpu"] > 0 and prometheus["rss"] > 10 * 2**20 and prometheus["rule_eval_s"] > 0
    assert prometheus["missed"] >= 0
    assert apart_report(prometheus) == text
    assert "then Prometheus + the recording rules alone, the same 3 targets" in text
    assert "ratios: CPU" in text and "RSS" in text
    # When its rule groups miss iterations, its CPU is only a floor of what it wanted.
    behind = apart_report({**prometheus, "missed": 4})
    assert "CPU at most" in behind and "did not keep up" in behind
    assert "CPU at most" not in apart_report({**prometheus, "missed": 0})
