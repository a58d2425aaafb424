"""bench/service_scrape.py's measurement runs on the real collector and names every stage it times
(the numbers themselves belong to the bench, on a quiet machine: docs/measurements.md)."""

from __future__ import annotations

import asyncio

from bench.pages import v1_page
from bench.pageserver import PageServer, growing
from bench.service_scrape import measure, variants


def test_the_scrape_bench_times_each_stage_of_the_real_path() -> None:
    with PageServer({"/v1": growing(variants(v1_page(), 40))}) as server:
        ours, http, stages = asyncio.run(measure(f"{server.base}/v1", 5.0))
    assert ours and http and all(t > 0 for t in ours + http)
    assert list(stages) == ["http", "check", "detect", "parse", "extract", "store", "derive", "view", "render"]
    assert all(v >= 0 for v in stages.values()) and stages["http"] > 0 and stages["parse"] > 0
