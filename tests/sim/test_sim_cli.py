"""`python -m monitor.sim`: serves, drives itself, and exits when its duration is over."""

from __future__ import annotations

import json
import subprocess
import sys

from monitor.ports import free_port


def test_module_entry_serves_load_and_exits():
    port = free_port()
    command = [sys.executable, "-W", "error", "-m", "monitor.sim", "--port", str(port),
               "--rps", "10", "--duration", "0.5", "--time-scale", "0.01", "--seed", "1"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=True)
    lines = done.stdout.strip().splitlines()
    assert lines[0] == f"vLLM V1 simulator on http://127.0.0.1:{port} (metrics at /metrics)"
    summary = json.loads(lines[-1])
    assert summary["sent"] == summary["ok"] == 5
