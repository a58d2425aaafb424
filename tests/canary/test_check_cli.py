"""`infermon check` probes every canary once, as a user runs it (a real process, the simulator)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.canary.conftest import MODEL


def test_check_probes_each_canary_once(start_sim, tmp_path: Path) -> None:
    sim = start_sim()
    config = tmp_path / "canary.yaml"
    config.write_text(
        "infra: {nvml: {enabled: 'false'}}\n"
        f"service:\n  targets: [{{name: sim, url: '{sim.metrics_url}'}}]\n"
        "canary:\n  probes:\n"
        f"    - {{name: chat, base_url: '{sim.url}/v1', model: '{MODEL}', target: sim, timeout: 5s}}\n"
        f"    - {{name: paris, base_url: '{sim.url}/v1', model: '{MODEL}', expect: Paris, timeout: 5s}}\n"
    )
    result = subprocess.run([sys.executable, "-m", "monitor.cli", "check", "--config", str(config)],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ, "INFERMON_STORAGE__URL": "sqlite://"})
    assert result.returncode == 1, result.stdout + result.stderr  # one canary fails
    lines = result.stdout.splitlines()
    assert any(line.startswith("  canary chat") and " ok, TTFT " in line and "32 tokens" in line for line in lines)
    assert any(line.startswith("  canary paris") and "FAILED: expect_mismatch" in line for line in lines)
    assert sim.sim.scheduler.running == [] and "Traceback" not in result.stderr
