"""Every panel proven against a real Prometheus: the Debian `prometheus` binary scrapes a real
`infermon demo` process (the vLLM simulator under load, the replayed H200 trace, the judge
simulator, the canary, the cost layer) and loads alerts/*.yml; every panel query of every
dashboard, and every template variable's query, must return data.

Panels that cannot have data in this scenario are listed in NO_DATA with the reason; the test
fails if one of them starts returning data (so the list stays true) or if any other is empty.
About two minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from monitor.ports import free_port
from tests.conftest import require_binary
from tests.dashboards.panels import LABEL_VALUES, ROOT, PanelQuery, expanded_variables, queries
from tests.support.promserver import PrometheusServer
from tests.support.served_process import stop

pytestmark = [pytest.mark.prometheus, pytest.mark.long]

DEMO_SECONDS = 240
WAIT_SECONDS = 150
# (dashboard, panel title) -> why the demo cannot give it data within the test's minutes
NO_DATA = {
    ("infrastructure.json", "MIG instance memory used"): "the replayed H200 is not MIG-partitioned",
    ("infrastructure.json", "Uncorrected ECC errors in the range"):
        "the H200 recording holds no ECC counter (NVML and dcgm-exporter readings do)",
    ("infrastructure.json", "XIDs in the last hour"):
        "a healthy replay logs no XID; tests/infra/test_nvml_health.py and test_health_alerts.py show them",
    ("infrastructure.json", "Row remap pending / failed"):
        "the H200 recording holds no health fields; tests/infra/test_health_alerts.py (dcgm-exporter pages)",
    ("infrastructure.json", "Error counters' increase (10m)"):
        "the H200 recording holds no error counters; tests/infra/test_nvml_health.py",
    ("infrastructure.json", "Retired pages (Volta and older)"):
        "an H200 remaps rows, it retires no pages; tests/infra/test_health_alerts.py (a V100 page)",
    ("service.json", "P99 TTFT week over week"):
        "needs the same hours one and two weeks back; the trend rules' ratios against a real Prometheus "
        "holding weeks: tests/history/test_trend_exact.py, test_weeks_both_evaluators.py",
    ("service.json", "P99 TTFT growth a day"):
        "needs two weeks and a day and a half back; the creep rule's growth a day against a real Prometheus "
        "holding weeks: tests/history/test_trend_exact.py",
    ("service.json", "Mean prompt time per token (llama.cpp)"):
        "the demo's engines are vLLM; llama.cpp's busy-time counters: tests/service/test_llamacpp_live.py",
    ("service.json", "Mean time per generated token (llama.cpp)"):
        "the demo's engines are vLLM; llama.cpp's busy-time counters: tests/service/test_llamacpp_live.py",
    ("service.json", "Speculative decoding: draft tokens accepted"):
        "the simulated vLLM runs without speculative decoding; tests/service/test_real_engine_pages.py",
    ("service.json", "Draft tokens accepted by position (vLLM)"):
        "the simulated vLLM runs without speculative decoding; vLLM 0.33's per-position counter: "
        "tests/service/test_real_engine_pages.py, tests/integration/test_recording_exact.py",
    ("service.json", "Draft acceptance: its baseline, and the window against it"):
        "the simulated vLLM runs without speculative decoding; the baselines' rules: "
        "tests/integration/test_recording_exact.py",
    ("service.json", "Prefix-cache hit ratio: its baseline, and the window against it"):
        "a baseline exists once 90 % of its window (10 min in the demo) is history "
        "(tests/integration/test_recording_exact.py, the scorecard's prefix_cache_loss)",
    ("service.json", "Speculative decoding: tokens per target step"):
        "the simulated vLLM runs without speculative decoding; tests/service/test_real_engine_pages.py",
    ("service.json", "Busiest rank over the mean load"):
        "the simulated vLLM is one data-parallel rank (an imbalance needs two); vLLM 0.33's and SGLang's "
        "two-rank pages: tests/service/test_real_engine_pages.py, tests/integration/test_recording_gauges.py",
    ("service.json", "LoRA adapters running / waiting"):
        "the simulated vLLM serves no LoRA adapter; lora_requests_info: tests/service/test_real_engine_pages.py",
    ("service.json", "LoRA adapter slots (--max-loras)"):
        "the simulated vLLM serves no LoRA adapter; lora_requests_info: tests/service/test_real_engine_pages.py",
    ("service.json", "Speculative decoding as the engine reports it (SGLang)"):
        "the demo's engines are vLLM; SGLang's own acceptance gauges: tests/service/test_real_engine_pages.py",
    ("service.json", "Accepted length as the engine reports it (SGLang)"):
        "the demo's engines are vLLM; SGLang's own acceptance gauges: tests/service/test_real_engine_pages.py",
    ("cost.json", "$/token against its baseline"):
        "needs a full trailing baseline window (service.baseline_window, 10 min in the demo) before the window",
    ("service.json", "Throughput against its baseline"):
        "a baseline exists once 90 % of its window (10 min in the demo) is history "
        "(tests/service/test_baseline_coverage.py)",
    ("cost.json", "Unusually long requests"):
        "against the length baseline, which needs 90 % of its window (10 min in the demo) of history first",
}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    binary = require_binary("prometheus")
    workdir = tmp_path_factory.mktemp("demo")
    port = free_port()
    env = {**os.environ, "INFERMON_STORAGE__URL": f"sqlite:///{workdir / 'demo.db'}", "PYTHONUNBUFFERED": "1"}
    env.pop("OPENAI_API_KEY", None)
    log = (workdir / "demo.log").open("w")
    demo = subprocess.Popen([sys.executable, "-m", "monitor.cli", "demo", "--port", str(port),
                             "--duration", str(DEMO_SECONDS)], env=env, stdout=log, stderr=subprocess.STDOUT,
                            cwd=workdir)
    server = PrometheusServer({"inference-monitor": [f"http://127.0.0.1:{port}/metrics"]}, interval="2s",
                              binary=binary, rule_files=sorted((ROOT / "alerts").glob("*.yml")))
    try:
        server.start()
        yield server
    finally:
        server.stop()
        stop(demo)
        log.close()
    assert "Traceback" not in (workdir / "demo.log").read_text()


def _has_data(prom: PrometheusServer, expr: str) -> bool:
    return bool(prom.query(expr))


def _label_values(prom: PrometheusServer, query: str) -> list[str]:
    """What Grafana's `label_values(selector, label)` asks Prometheus: /api/v1/label/<label>/values."""
    match = LABEL_VALUES.match(query)
    assert match, query
    params = {"match[]": match["selector"]} if match["selector"] else {}
    answer = httpx.get(f"{prom.url}/api/v1/label/{match['label']}/values", params=params, timeout=10)
    answer.raise_for_status()
    values: list[str] = answer.json()["data"]
    return values


@pytest.fixture(scope="module")
def answered(prometheus: PrometheusServer) -> dict[PanelQuery, bool]:
    """Each panel query -> whether it returned data, polled until all expected do (or time is up)."""
    window = sorted(_label_values_when_ready(prometheus))[0]
    results = {query: False for query in queries()}
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for query in results:
            results[query] = results[query] or _has_data(prometheus, query.promql(window))
        if all(ok for q, ok in results.items() if (q.dashboard, q.panel) not in NO_DATA):
            break
        time.sleep(3)
    return results


def _label_values_when_ready(prom: PrometheusServer) -> list[str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        windows = _label_values(prom, "label_values(inference_requests_per_second, window)")
        if windows:
            return windows
        time.sleep(1)
    raise AssertionError("Prometheus has no inference_requests_per_second from the demo after a minute")


def test_every_panel_query_returns_data(answered: dict[PanelQuery, bool]) -> None:
    empty = sorted({(q.dashboard, q.panel, q.expr) for q, ok in answered.items()
                    if not ok and (q.dashboard, q.panel) not in NO_DATA})
    assert not empty, "panels without data:\n" + "\n".join(map(str, empty))
    assert len(answered) >= 60


def test_the_no_data_list_is_true(answered: dict[PanelQuery, bool]) -> None:
    listed = {(q.dashboard, q.panel): ok for q, ok in answered.items() if (q.dashboard, q.panel) in NO_DATA}
    assert set(listed) == set(NO_DATA), "a NO_DATA entry names no panel"
    assert not any(listed.values()), f"listed as without data but answered: {listed}"


def test_every_template_variable_has_values(prometheus: PrometheusServer, answered: dict[PanelQuery, bool]) -> None:
    for dashboard, name, query in expanded_variables():
        values = _label_values(prometheus, query)
        assert values, (dashboard, name, query)
    assert _label_values(prometheus, "label_values(inference_gpu_up, node)") == ["demo-h200"]
    assert _label_values(prometheus, "label_values(inference_target_up, target)") == ["vllm-sim"]


def test_alert_annotation_reads_prometheus_alerts(prometheus: PrometheusServer,
                                                  answered: dict[PanelQuery, bool]) -> None:
    # The demo's H200 starts busy (the replay is held where the fault cycle says): GPUUtilizationSaturated
    # and GPUPowerHigh are pending at once (they fire after their 10 m `for`, beyond this test); the
    # annotation's series exists with the labels it selects on.
    alerts = prometheus.query("ALERTS")
    assert alerts and {a["metric"]["alertstate"] for a in alerts} <= {"pending", "firing"}
