"""bench.fleet_view, bench.alert_eval and bench.target_memory at a toy size, run as an operator runs
them: they run, and what they assert holds (the page kept per target equals the whole render; every
target's alerts are active; one target's stores are what its windows keep)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.bench_process import run_bench


def test_fleet_view_runs_and_its_kept_page_equals_the_whole() -> None:
    out = run_bench("fleet_view", "--targets", "12", "--models", "2", "--repeats", "4")
    # (the bench asserts each tick's kept page equals the whole render: a failure exits non-zero)
    assert "12 targets x 2 models" in out and re.search(r"kept per target \d+ ms", out)


def test_alert_eval_runs_with_two_alerts_a_target() -> None:
    out = run_bench("alert_eval", "--targets", "10", "--repeats", "2")
    assert "10 targets x 1 model(s)" in out and "every TTFT moved" in out and "a tenth stale" in out, out
    assert "20 alerts active" in out, out  # a stale target's two alerts held, not resolved


def test_target_memory_runs_and_reports_one_targets_stores(tmp_path: Path) -> None:
    run_bench("target_memory", "--models", "1", "--hours", "0.2", "--json", str(tmp_path / "rows.json"))
    [row] = json.loads((tmp_path / "rows.json").read_text())  # 48 scrapes at the shipped 15 s
    # The window store keeps its 5 min and one scrape (21), dropping old columns 16 at a time; the
    # baseline store keeps them all (it holds an hour and the longest window).
    assert row["scrapes"] == 48 and 21 <= row["columns"] < 21 + 16
    assert row["baseline_columns"] == 48 and row["series"] > row["baseline_series"] > 0
    # The arrays are part of what the target allocated, and each holds 8 bytes a cell at most.
    assert 0 < row["store_mib"] + row["baseline_mib"] < row["target_mib"]
    # A replica of it shares what the process keeps once (line heads, series keys): it costs less.
    assert 0 < row["replica_mib"] < row["target_mib"]
    out = run_bench("target_memory", "--models", "1", "--hours", "0.05")
    assert re.search(r"^\s+1\s+12\s+200\s+33\s", out, re.M)
