"""bench/service_scrape.py's measurement runs on the real collector and names every stage it times
(the numbers themselves belong to the bench, on a quiet machine: docs/measurements.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.bench_process import run_bench

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs the Debian prometheus")


def test_the_scrape_bench_times_each_stage_of_the_real_path(tmp_path: Path) -> None:
    out = run_bench("service_scrape", "--seconds", "10", "--models", "0", "--json", str(tmp_path / "scrape.json"))
    measured = json.loads((tmp_path / "scrape.json").read_text())
    assert list(measured) == ["/v1", "/fleet"]
    for page in measured.values():
        ours, http, stages = page["ours"], page["http"], page["stages"]
        assert ours and http and all(t > 0 for t in ours + http)
        assert list(stages) == ["http", "check", "detect", "parse", "extract", "store", "derive", "view", "render"]
        assert all(v >= 0 for v in stages.values()) and stages["http"] > 0 and stages["parse"] > 0
    assert "prometheus ms" in out and "scrape path" in out
