"""`infermon demo` shows the quality layer within its first minute (judge simulator, no key)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from monitor.ports import free_port
from tests.support.served_process import stop


@pytest.mark.long
def test_demo_runs_the_quality_layer_in_the_first_minute(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "INFERMON_STORAGE__URL": f"sqlite:///{tmp_path / 'demo.db'}", "PYTHONUNBUFFERED": "1"}
    env.pop("OPENAI_API_KEY", None)
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "monitor.cli", "demo", "--port", str(port), "--duration", "240"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        day = datetime.now(UTC).date().isoformat()
        runs: dict[str, object] = {}
        while not runs:
            # The demo starts its first run within its first minute; the bound adds the process start
            # and the judge's calls on a machine busy with other work (two CPU hogs: ~2x slower).
            if time.monotonic() - started > 150:
                raise AssertionError("no quality run in the first minute:\n" + stop(process))
            time.sleep(1)
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/quality/runs/{day}", timeout=5)
            except httpx.HTTPError:
                continue
            models = answer.json()["models"] if answer.status_code == 200 else {}
            runs = {m: r for m, r in models.items() if r["status"] == "done"}  # "running" while judged
        today = runs["meta-llama/Llama-3.1-8B-Instruct"]
        assert isinstance(today, dict) and today["samples"] >= 90 and today["psi"] is not None
        text = ""
        picked_up = time.monotonic() + 30  # the view is refreshed every 5 s (the demo's refresh_interval)
        while 'inference_quality_samples{model="meta-llama/Llama-3.1-8B-Instruct"} 30.0' in text or not text:
            assert time.monotonic() < picked_up, "the served view did not pick up today's run"
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            time.sleep(0.5)
        assert "inference_quality_output_length_psi{" in text and "inference_quality_judge_cost_usd_total" in text
        report = httpx.get(f"http://127.0.0.1:{port}/reports/quality/{day}", timeout=5)
        assert report.status_code == 200 and "<svg" in report.text
        listing = httpx.get(f"http://127.0.0.1:{port}/api/v1/quality/runs", timeout=5).json()["runs"]
        assert len(listing) == 8  # today and the simulated week of baseline
        # The README: the demo's first alerts fire within its first minute, before the fault cycle's
        # first fault at 3:00 (it once said "the first alert at minute 3"); the bound allows a busy machine.
        firing: list[dict[str, object]] = []
        while not firing:
            assert time.monotonic() - started < 170, "no alert firing before the first fault:\n" + stop(process)
            active = httpx.get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=5).json()["active"]
            firing = [alert for alert in active if alert["state"] == "firing"]
            time.sleep(0.5)
    finally:
        output = stop(process)
    assert "Traceback" not in output, output[-3000:]
