"""Exactly Prometheus' numbers: the samples our monitor scraped, backfilled into the real Prometheus.

The monitor scrapes two vLLM targets at irregular times (±2 s jitter on a 15 s interval, so
rate()'s extrapolation rules all come into play); one engine restarts mid-run (counter reset).
Every sample it saw is written, with its scrape timestamp and a `target` label, as OpenMetrics,
turned into TSDB blocks by `promtool tsdb create-blocks-from openmetrics`, and loaded by a real
`prometheus`. The PromQL an operator would write must then give our numbers to 1e-9.

The monitor follows Prometheus 3.x (left-open ranges, 2.51+ extrapolation); the binary here is
Debian's 2.42. The two agree on this data, and the test checks that it stays so: no sample lies
exactly on a window's left edge (2.42 would include it, 3.x does not), and the counters' first
samples are far enough from zero that the zero-point clamp, which 2.42 applied in another order,
never bites. Rates of counters that start inside the window at a small value would differ.
"""

from __future__ import annotations

import asyncio
import random
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.service.engines import VLLM_V1
from tests.conftest import FIXTURES, require_binary
from tests.service.pagegen import grow
from tests.support.promserver import PrometheusServer

pytestmark = pytest.mark.prometheus

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SCRAPES = 40
REAL_PAGES = FIXTURES / "real_engines"


def _spec_decode_families(text: str) -> str:
    """The speculative-decoding counters of one engine as vLLM 0.33's own code wrote them."""
    keep = []
    for line in text.splitlines():
        name = line.split()[2] if line.startswith("# ") else line.split("{", 1)[0]
        if name.startswith("vllm:spec_decode") and name.endswith("_total") and (
                line.startswith("# ") or 'engine="0"' in line):
            keep.append(line)
    return "\n".join(keep) + "\n"


# vLLM's sample page (no speculative decoding) with vLLM 0.33's speculative-decoding counters.
BASE = (FIXTURES / "sample_vllm_v1.prom").read_text() + _spec_decode_families(
    (REAL_PAGES / "vllm-0.33.0_t60.prom").read_text())


def page(target: str, step: int) -> str:
    if target == "a":
        # From step 20 on the prefix cache finds less (a new system prompt): the hit ratio falls
        # against its baseline, so its baseline ratios are not a constant 1.
        # Likewise a draft's last position is accepted less often.
        hits = 1 + 0.05 * min(step, 20) + 0.01 * max(step - 20, 0)
        skip = ("_created", "num_requests", "perc", "info", "prefix_cache_hits")
        text = grow(grow(BASE, 1 + 0.05 * step, skip=skip), hits, prefix="vllm:prefix_cache_hits_total")
        return _scaled(text, LAST_POSITION, hits / (1 + 0.05 * step))
    # Target b's engine restarts after step 24: its counters start again from a small value.
    return grow(BASE, 1 + 0.08 * step) if step <= 24 else grow(BASE, 0.05 + 0.07 * (step - 25))


LAST_POSITION = (f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{MODEL}",'
                 'position="2"}')


def _scaled(text: str, series: str, factor: float) -> str:
    """`text` with the one sample of `series` multiplied by `factor`."""
    line = re.compile(rf"^{re.escape(series)} (\S+)$", re.M)
    assert line.search(text), series
    return line.sub(lambda m: f"{series} {float(m.group(1)) * factor!r}", text)


def scrape_times() -> list[float]:
    rng = random.Random(3)
    start = round(time.time() - 3 * 3600)  # inside the default retention, clear of the head block
    return [start + 15 * i + rng.randint(-2000, 2000) / 1000 for i in range(SCRAPES)]


def run_monitor(times: list[float]) -> tuple[Monitor, dict[str, list[tuple[float, str]]]]:
    served: dict[str, list[tuple[float, str]]] = {"a": [], "b": []}
    step = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        text = page(request.url.host, step[0])
        served[request.url.host].append((times[step[0]], text))
        return httpx.Response(200, text=text)

    settings = load_settings(None, {"infra": {"nvml": {"enabled": "false"}}, "service": {
        # A baseline short enough for the scrapes to cover it (>= 90 %): the ratios exist to compare.
        "scrape_interval": "15s", "windows": ["1m", "5m"], "baseline_window": "5m",
        "targets": [{"name": "a", "url": "http://a/metrics"}, {"name": "b", "url": "http://b/metrics"}]}})
    monitor = Monitor(settings, client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
                      wall=lambda: times[step[0]])

    async def run() -> None:
        for index in range(SCRAPES):
            step[0] = index
            await monitor.run_once()
        await monitor.aclose()

    asyncio.run(run())
    return monitor, served


def openmetrics(served: dict[str, list[tuple[float, str]]]) -> str:
    """The scraped samples we derive from, one gauge family per sample name, in time order."""
    series: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]] = {}
    for target, pages in served.items():
        for ts, text in pages:
            for fam in text_string_to_metric_families(text):
                for sample in fam.samples:
                    if sample.name in VLLM_V1.wanted:
                        labels = tuple(sorted({**sample.labels, "target": target}.items()))
                        series.setdefault(sample.name, {}).setdefault(labels, []).append((ts, sample.value))
    lines = []
    for name, by_labels in series.items():
        lines.append(f"# TYPE {name} gauge")
        for labels, points in by_labels.items():
            label_text = ",".join(f'{k}="{v}"' for k, v in labels)
            lines.extend(f"{name}{{{label_text}}} {value!r} {ts:.3f}" for ts, value in points)
    return "\n".join(lines) + "\n# EOF\n"


def promql(prom: PrometheusServer, expr: str, at: float) -> float:
    result = prom.query(expr, at=at)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


def backfilled(tmp_path: Path) -> tuple[Monitor, list[float], PrometheusServer]:
    """The monitor after its scrapes, their times, and a (not yet started) Prometheus holding every
    sample the monitor saw."""
    promtool = require_binary("promtool")
    binary = require_binary("prometheus")
    times = scrape_times()
    monitor, served = run_monitor(times)
    source = tmp_path / "scraped.om"
    source.write_text(openmetrics(served))
    prom = PrometheusServer({}, binary=binary)
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(prom.dir / "data")],
                   check=True, capture_output=True)
    return monitor, times, prom


def test_backfilled_prometheus_gives_our_numbers(tmp_path: Path) -> None:
    monitor, times, prom = backfilled(tmp_path)
    view = monitor.service.view
    for window_seconds in (60, 300):  # the data is where Prometheus 2.42 and 3.x agree
        assert round((times[-1] - window_seconds) * 1000) not in {round(t * 1000) for t in times}
    checked = 0
    with prom:
        for window in ("1m", "5m"):
            for target, selector in (("a", '{target="a"}'), ("b", '{target="b"}'), (None, "")):
                stats = view.fleet[(MODEL, window)] if target is None else view.targets[target].stats[(MODEL, window)]
                def rate(name: str, selector: str = selector, window: str = window) -> str:
                    return f"sum(rate(vllm:{name}{selector}[{window}]))"

                def quantile(q: float, name: str, selector: str = selector, window: str = window) -> str:
                    return f"histogram_quantile({q}, sum by (le) (rate(vllm:{name}_bucket{selector}[{window}])))"

                expected = {
                    "requests": (stats.requests_per_second, rate("request_success_total")),
                    "tokens": (stats.generation_tokens_per_second, rate("generation_tokens_total")),
                    "prompt": (stats.prompt_tokens_per_second, rate("prompt_tokens_total")),
                    "preempt": (stats.preemptions_per_second, rate("num_preemptions_total")),
                }
                for metric, family in (("ttft", "time_to_first_token_seconds"),
                                       ("tpot", "request_time_per_output_token_seconds"),
                                       ("e2e", "e2e_request_latency_seconds"), ("queue", "request_queue_time_seconds")):
                    for q, ours in stats.quantiles[metric].items():
                        expected[f"{metric}{q}"] = (ours, quantile(q, family))
                for name, (ours, expr) in expected.items():
                    assert ours is not None, name
                    theirs = promql(prom, expr, times[-1])
                    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12), (name, window, target)
                    checked += 1
    assert checked == 2 * 3 * (4 + 4 * 3)
