"""Where uvloop is installed (vLLM's and SGLang's images have it, `uvicorn[standard]` pulls it in),
`infermon serve` still runs on asyncio's own loop; and an embedder who runs the monitor on uvloop
gets scrapes and parse workers that work, not every target DOWN with a bare AssertionError."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import uvicorn

from monitor.app import create_app
from monitor.config import Settings, load_settings
from monitor.runtime import Monitor
from monitor.server import uvicorn_config
from tests.support.pagefarm import PageFarm

PAGE = (Path(__file__).parent / "fixtures" / "sample_vllm_v1.prom").read_bytes()


def uvloop_installed() -> None:
    # a dev dependency (pyproject.toml): without it these tests would prove nothing, so they fail
    assert importlib.util.find_spec("uvloop") is not None, "uvloop is a dev dependency: pip install -e '.[dev]'"


def settings(urls: list[str], parse_workers: int) -> Settings:
    return load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
        "windows": ["30s", "1m"], "scrape_interval": "5s", "parse_workers": parse_workers,
        "targets": [{"name": f"t{i}", "url": url} for i, url in enumerate(urls)]}})


def wait_for(condition: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_serve_runs_on_asyncios_loop_where_uvloop_is_installed() -> None:
    uvloop_installed()
    with PageFarm([PAGE], processes=1) as farm:
        monitor = Monitor(settings(farm.urls(2), parse_workers=1))
        config = uvicorn_config(create_app(monitor), monitor.settings.server)  # what `infermon serve` runs
        config.log_config = None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        try:
            wait_for(lambda: server.started, 20)
            with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=30,
                              trust_env=False) as client:
                wait_for(lambda: client.get("/api/v1/status").json()["event_loop"]["loop"] is not None)
                status = client.get("/api/v1/status").json()
                assert status["event_loop"]["loop"].startswith("asyncio."), status["event_loop"]
                wait_for(lambda: all(t["up"] for t in client.get("/api/v1/status").json()
                                     ["layers"]["service"]["targets"]))
        finally:
            server.should_exit = True
            thread.join(timeout=20)
            sock.close()
        assert not thread.is_alive()


def test_an_embedder_on_uvloop_scrapes_parses_in_workers_and_is_told(
        caplog: pytest.LogCaptureFixture) -> None:
    uvloop_installed()
    import uvloop

    with PageFarm([PAGE], processes=1) as farm:
        monitor = Monitor(settings(farm.urls(2), parse_workers=1))

        app = create_app(monitor, schedule=False)

        async def two_cycles() -> None:
            async with app.router.lifespan_context(app):  # closes the monitor (its workers) at the end
                for _ in range(2):
                    await monitor.run_once()

        with caplog.at_level(logging.WARNING, logger="monitor.app"), \
                asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(two_cycles())
    rows = monitor.service.status()
    assert [row["error"] for row in rows] == [None, None]
    assert all(row["up"] and row["engine"] == "vllm" for row in rows)
    assert any("not asyncio's own event loop" in r.getMessage() and "uvloop" in r.getMessage()
               for r in caplog.records)
