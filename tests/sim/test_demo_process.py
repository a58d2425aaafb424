"""`infermon demo` as a user starts it: a fresh state unless --keep-state, no DOWN before the
first scrape, and the replayed H200 busy while the simulated engine serves (#17 item 6)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from monitor.ports import free_port
from tests.support.served_process import stop


def _start(cwd: Path, port: int, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(Path.cwd())}
    env.pop("INFERMON_STORAGE__URL", None)
    return subprocess.Popen([sys.executable, "-m", "monitor.cli", "demo", "--port", str(port), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)


def _metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.long
def test_demo_starts_fresh_waits_for_the_first_scrape_and_its_gpu_follows_the_load(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "infermon-demo.db").write_text("not a database: a fresh demo must not open it")
    process = _start(tmp_path, port, "--duration", "170")
    try:
        deadline = time.monotonic() + 150  # a busy machine starts slowly; the first fault is at 3:00
        statuses: list[dict[str, object]] = []
        util = None
        while util is None or util == 0:
            assert time.monotonic() < deadline and process.poll() is None, f"no busy GPU; statuses {statuses[-3:]}"
            time.sleep(0.5)
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/api/v1/status", timeout=5).json()
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            except httpx.HTTPError:
                continue
            statuses.append(status)
            rps = _metric(text, "inference_requests_per_second")
            util = _metric(text, "inference_gpu_utilization_ratio") if rps else None
        assert util is not None and 0.25 <= util <= 0.35  # the 30 % duty part of the recording, not 0 % idle
        alerts = httpx.get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5).json()
        # nothing restored from an earlier demo's database, no DOWN, GPU or cost alert at start (the
        # quality layer's come from today's run, which the demo's simulated history makes drift; the
        # creep of the seeded weeks on the simulated engine fires at the first evaluation)
        assert [(t["labels"]["alertname"], t["status"]) for t in alerts["transitions"]
                if t["labels"].get("layer") != "quality" and t["labels"].get("kind") != "trend"] == []
        assert {(t["labels"]["alertname"], t["labels"]["target"], t["status"]) for t in alerts["transitions"]
                if t["labels"].get("kind") == "trend"} == {("TTFTP99Creep", "vllm-sim", "firing"),
                                                           ("TPOTP99Creep", "vllm-sim", "firing")}
    finally:
        output = stop(process)
    assert "Traceback" not in output, output[-3000:]
    waiting = output.index("waiting for the first scrape of vllm-sim")
    assert waiting < output.index("overview  http://")  # the banner only once the target was scraped
    assert "DOWN" not in output
    assert (tmp_path / "infermon-demo.db").read_text().startswith("not a database")  # left alone


@pytest.mark.long
def test_demo_keeps_its_state_only_when_asked(tmp_path: Path) -> None:
    process = _start(tmp_path, free_port(), "--duration", "3", "--keep-state")
    try:
        process.wait(timeout=60)
    finally:
        output = stop(process)
    assert process.returncode == 0, output[-3000:]
    assert (tmp_path / "infermon-demo.db").stat().st_size > 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_the_demo_in_order_within_seconds(tmp_path: Path, sig: signal.Signals) -> None:
    """Started as a shell's background job would be (SIGINT ignored), stopped while the quality
    layer judges: the monitor shuts down gracefully and the process exits. Its embedded servers
    once each captured the signal and re-raised it after their own shutdown, so a Ctrl-C took
    ~2 minutes, and with SIGINT ignored it did nothing."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(Path.cwd())}
    env.pop("INFERMON_STORAGE__URL", None)
    process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "demo", "--port", str(port), "--duration", "600"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 120
        while True:  # the history is being judged and the request log fed: the busiest part of the start
            assert time.monotonic() < deadline and process.poll() is None, "the demo did not start"
            try:
                runs = httpx.get(f"http://127.0.0.1:{port}/api/v1/quality/runs", timeout=5).json()["runs"]
            except (httpx.HTTPError, ValueError):
                runs = []
            if runs:
                break
            time.sleep(0.2)
    finally:
        output = stop(process, sig)  # it took 115 s before the fix; seconds after it
    assert process.returncode == 130, output[-3000:]
    assert "monitor stopped" in output and "inference-monitor demo: stopped" in output
    assert "Traceback" not in output and "did not stop within" not in output, output[-3000:]


def test_a_demo_server_that_fails_to_start_is_an_error_not_a_wait() -> None:
    """The webhook sink once failed at its route's creation: the demo waited for it forever."""
    from monitor.demo import _helper

    async def failing(started: asyncio.Event) -> None:
        raise OSError("[Errno 98] address already in use")

    tasks: list[asyncio.Task[None]] = []
    with pytest.raises(RuntimeError, match=r"the webhook-sink did not start.*address already in use"):
        asyncio.run(_helper(tasks, "webhook-sink", failing))
    assert tasks[0].done()
