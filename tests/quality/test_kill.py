"""`infermon quality run` killed with SIGKILL mid-run (a real subprocess), then run again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from monitor.config import load_settings
from monitor.quality.store import QualityStore
from monitor.runtime import Monitor
from monitor.store.session import Store
from tests.quality.helpers import DAY, make_samples, quality_settings
from tests.quality.judgeserver import JudgeScript, judge_server
from tests.support.appserver import serve_app

SAMPLES = 24


def judged_count(url: str) -> int:
    store = Store(url)
    quality = QualityStore(store.engine)
    run = quality.run(DAY, "qwen3-8b")
    count = 0 if run is None else sum(1 for j in quality.judgments(run.id) if j.judged_at is not None)
    store.close()
    return count


@pytest.mark.long
def test_kill_9_then_rerun_judges_only_what_was_missing(tmp_path: Path) -> None:
    script = JudgeScript(delay_s=0.25)
    with judge_server(script) as judge_url:
        settings = quality_settings(tmp_path, judge_url, sample_size=SAMPLES,
                                    judge={"base_url": judge_url, "concurrency": 2})
        db = settings.storage.url
        store = Store(db)
        QualityStore(store.engine).add_samples(make_samples(SAMPLES))
        store.close()
        config = tmp_path / "quality.yaml"
        config.write_text(yaml.safe_dump({"quality": settings.quality.model_dump(mode="json")}))
        command = [sys.executable, "-m", "monitor.cli", "quality", "run", "--config", str(config), "--date", DAY]

        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy())
        deadline = time.monotonic() + 60
        while judged_count(db) < 6:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=10)
        assert process.returncode == -signal.SIGKILL

        kept = judged_count(db)
        assert 6 <= kept < SAMPLES
        with serve_app(Monitor(load_settings(config))) as url:  # the interrupted run, as the API shows it
            shown = httpx.get(f"{url}/api/v1/quality/runs/{DAY}").json()["models"]["qwen3-8b"]
        assert shown["status"] == "running" and (shown["judged"], shown["sampled"]) == (kept, SAMPLES)
        calls_before = script.calls
        rerun = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), timeout=120,
                               check=False)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        assert "resumed" in rerun.stdout
        assert script.calls - calls_before == SAMPLES - kept
        assert judged_count(db) == SAMPLES

        again = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), timeout=120,
                               check=False)
        assert "skipped" in again.stdout and "judge calls: 0" in again.stdout
        assert script.calls - calls_before == SAMPLES - kept
