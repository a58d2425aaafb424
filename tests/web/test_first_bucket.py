"""An engine quantile whose every observation fell in the histogram's first bucket: /metrics keeps
histogram_quantile()'s number (a share of the bound), the overview and `infermon status` say
"< bound", which is what the page actually says."""

from __future__ import annotations

import asyncio
import io
import re

import httpx
from rich.console import Console

from monitor.runtime import Monitor
from monitor.web.page import ms
from monitor.web.terminal import print_overview
from tests.service.pagegen import grow
from tests.support.appserver import serve_app
from tests.support.pageserver import Generated, PageServer
from tests.web.scenario import BASE_PAGE, cell, row, settings_for

TPOT = "vllm:request_time_per_output_token_seconds"


def _all_in_first_bucket(page: str) -> str:
    """The page with every request's TPOT in its first bucket (le="0.01"): each bucket = the count."""
    count = re.search(rf"^{re.escape(TPOT)}_count\{{[^}}]*\}} (\S+)$", page, re.M)
    assert count is not None
    bucket = rf"^({re.escape(TPOT + '_bucket')}\{{[^}}]*\}}) \S+$"
    return re.sub(bucket, lambda m: f"{m.group(1)} {count.group(1)}", page, flags=re.M)


def test_a_first_bucket_quantile_reads_below_its_bound_on_the_overview_and_in_status() -> None:
    fast = _all_in_first_bucket(BASE_PAGE)
    with PageServer() as server:
        server.set("/a", Generated(lambda hit: grow(fast, 1 + 0.1 * hit)))
        server.set("/b", Generated(lambda hit: grow(BASE_PAGE, 1 + 0.2 * hit)))
        monitor = Monitor(settings_for(server, gpus=False))
        clock = [1_767_300_000.0]
        monitor.wall = lambda: clock[0]

        async def collect() -> None:
            for _ in range(4):
                await monitor.run_once()
                clock[0] += 5.0

        asyncio.run(collect())
        with serve_app(monitor) as url, httpx.Client(base_url=url, timeout=10, trust_env=False) as client:
            html = client.get("/").text
            metrics = client.get("/metrics").text
        overview = monitor.status()["overview"]
        asyncio.run(monitor.aclose())

    stats = next(iter(monitor.service.view.targets["vllm-a"].stats.values()))
    assert stats.below_first_bound == {"tpot": 0.01}
    # The exported number is histogram_quantile()'s: P50 is half the first bound.
    p50 = re.search(r'^inference_tpot_seconds\{[^}]*quantile="0.5"[^}]*target="vllm-a"[^}]*window="30s"[^}]*\} (\S+)',
                    metrics, re.M)
    assert p50 is not None and float(p50.group(1)) == 0.005
    a_row, b_row = row(html, "target", "vllm-a"), row(html, "target", "vllm-b")
    assert cell(a_row, "tpot_p50") == cell(a_row, "tpot_p99") == "&lt; 10 ms"
    # TTFT, and the other target's TPOT, spread over their buckets: numbers.
    assert cell(a_row, "ttft_p99") == ms(stats.quantiles["ttft"][0.99])
    assert not cell(b_row, "tpot_p50").startswith("&lt;")
    for width in (200, 80):  # the table, and the phone-width lines
        console = Console(file=io.StringIO(), width=width)
        print_overview(console, overview, "http://monitor")
        text = console.file.getvalue()  # type: ignore[attr-defined]
        assert text.count("< 10 ms") == 2, text  # vllm-a's two TPOT quantiles, and nothing else
