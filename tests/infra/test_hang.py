"""A driver that hangs: the real app under uvicorn keeps answering, the GPU shows up as down.

The fake NVML blocks every read of GPU 1 forever (until the test releases it), as a wedged
driver does. Ticks run every 200 ms with a 300 ms deadline.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn

from monitor.app import create_app
from monitor.runtime import Monitor
from tests.infra.conftest import infra_settings
from tests.infra.fakes import HangingNvml, h200_trace
from tests.infra.scrape import Samples, samples, value


class MonitorServer:
    """create_app(monitor) served by uvicorn on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self, monitor: Monitor) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(create_app(monitor), log_config=None, access_log=False, lifespan="on",
                                log_level="warning", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def __enter__(self) -> MonitorServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.02)
        raise RuntimeError("monitor did not come up")

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()


@pytest.fixture
def hanging() -> Iterator[HangingNvml]:
    nvml = HangingNvml(h200_trace(), time.monotonic, count=2, hang={1})
    yield nvml
    nvml.release.set()


def timed_get(url: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.get(url, timeout=5)
    return response, time.monotonic() - started


def metrics(server: MonitorServer) -> Samples:
    response, elapsed = timed_get(f"{server.url}/metrics")
    assert response.status_code == 200 and elapsed < 1.0, elapsed
    return samples(response.text)


def test_hung_gpu_is_marked_down_while_the_monitor_keeps_answering(hanging: HangingNvml) -> None:
    settings = infra_settings(interval="200ms", timeout="300ms", nvml={"enabled": "true"})
    monitor = Monitor(settings, load_nvml=lambda: hanging)
    with MonitorServer(monitor) as server:
        deadline = time.monotonic() + 5
        page = metrics(server)
        while ("inference_gpu_up", (("gpu", "1"), ("node", "node-a"))) not in page or \
                value(page, "inference_gpu_up", node="node-a", gpu="1") != 0.0:
            assert time.monotonic() < deadline, "GPU 1 never showed up as down"
            page = metrics(server)
        # Several more ticks: every answer stays fast, GPU 0 keeps reading, GPU 1 stays down.
        stop_at = time.monotonic() + 1.5
        while time.monotonic() < stop_at:
            for path in ("/healthz", "/metrics"):
                response, elapsed = timed_get(server.url + path)
                assert response.status_code == 200 and elapsed < 1.0, (path, elapsed)
            time.sleep(0.05)
        page = metrics(server)
        assert value(page, "inference_gpu_up", node="node-a", gpu="0") == 1.0
        assert value(page, "inference_gpu_up", node="node-a", gpu="1") == 0.0
        assert value(page, "inference_monitor_collector_success", collector="infra", target="1") == 0.0
        assert value(page, "inference_monitor_collector_success", collector="infra", target="0") == 1.0
        assert ("inference_gpu_power_watts", (("gpu", "1"), ("node", "node-a"))) not in page
        # One stuck call, one stuck thread, however many ticks went by.
        assert hanging.entered == 1
        stuck = [t for t in threading.enumerate() if t.name == "infermon-nvml-gpu1"]
        assert len(stuck) == 1 and stuck[0].is_alive()
        status = httpx.get(f"{server.url}/api/v1/status", timeout=5).json()
        assert set(status["layers"]["infra"]["local"]["stuck_calls"]) == {"1"}
        assert monitor.health.get("infra", "1").runs >= 5
