"""A driver that hangs: the real app under uvicorn keeps answering, the GPU shows up as down.

The fake NVML blocks every read of GPU 1 forever (until the test releases it), as a wedged
driver does. Ticks run every 200 ms with a 300 ms deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from monitor.runtime import Monitor
from tests.infra.conftest import infra_settings
from tests.infra.fakes import HangingNvml, h200_trace
from tests.infra.scrape import Samples, samples, value
from tests.support.appserver import serve_app


@pytest.fixture
def hanging() -> Iterator[HangingNvml]:
    nvml = HangingNvml(h200_trace(), time.monotonic, count=2, hang={1})
    yield nvml
    nvml.release.set()


def timed_get(url: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.get(url, timeout=5)
    return response, time.monotonic() - started


def metrics(base: str) -> Samples:
    response, elapsed = timed_get(f"{base}/metrics")
    assert response.status_code == 200 and elapsed < 1.0, elapsed
    return samples(response.text)


def test_hung_gpu_is_marked_down_while_the_monitor_keeps_answering(hanging: HangingNvml) -> None:
    settings = infra_settings(interval="200ms", timeout="300ms", nvml={"enabled": "true"})
    monitor = Monitor(settings, load_nvml=lambda: hanging)
    with serve_app(monitor) as base:
        deadline = time.monotonic() + 5
        page = metrics(base)
        while ("inference_gpu_up", (("gpu", "1"), ("node", "node-a"))) not in page or \
                value(page, "inference_gpu_up", node="node-a", gpu="1") != 0.0:
            assert time.monotonic() < deadline, "GPU 1 never showed up as down"
            page = metrics(base)
        # Several more ticks: every answer stays fast, GPU 0 keeps reading, GPU 1 stays down.
        stop_at = time.monotonic() + 1.5
        while time.monotonic() < stop_at:
            for path in ("/healthz", "/metrics"):
                response, elapsed = timed_get(base + path)
                assert response.status_code == 200 and elapsed < 1.0, (path, elapsed)
            time.sleep(0.05)
        page = metrics(base)
        assert value(page, "inference_gpu_up", node="node-a", gpu="0") == 1.0
        assert value(page, "inference_gpu_up", node="node-a", gpu="1") == 0.0
        assert value(page, "inference_monitor_collector_success", collector="infra", target="1") == 0.0
        assert value(page, "inference_monitor_collector_success", collector="infra", target="0") == 1.0
        assert ("inference_gpu_power_watts", (("gpu", "1"), ("node", "node-a"))) not in page
        # One stuck call, one stuck thread, however many ticks went by.
        assert hanging.entered == 1
        stuck = [t for t in threading.enumerate() if t.name == "infermon-nvml-gpu1"]
        assert len(stuck) == 1 and stuck[0].is_alive()
        status = httpx.get(f"{base}/api/v1/status", timeout=5).json()
        assert set(status["layers"]["infra"]["local"]["stuck_calls"]) == {"1"}
        assert monitor.health.get("infra", "1").runs >= 5
