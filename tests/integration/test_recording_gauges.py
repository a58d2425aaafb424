"""The generated gauge rules in the real Prometheus, on the pages vLLM 0.33's and SGLang 0.5.23's own
metric code wrote: per-rank load and KV cache, the imbalance ratio, waiting reasons, sleep states
and SGLang's own acceptance, equal to what the monitor exports for the same pages."""

from __future__ import annotations

import time

import httpx
import pytest

from monitor.service.recording import expand, gauge_rules
from tests.conftest import require_binary
from tests.service.test_real_engine_pages import page, scrape_texts
from tests.support.pageserver import Page, PageServer
from tests.support.promserver import PrometheusServer

pytestmark = pytest.mark.prometheus

PAGES = {"vllm": "vllm-0.33.0_t60.prom", "sglang": "sglang-0.5.23_t60.prom"}
# Gauge rules the monitor has no own value for: `up` (Prometheus' own) and the totals checked in
# tests/integration/test_recording_exact.py.
CHECKED_ELSEWHERE = {"inference_target_up", "inference_requests_running", "inference_requests_waiting",
                     "inference_kv_cache_usage_ratio"}


def _ours() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The monitor's gauges for each page, keyed by name and labels (target and model included)."""
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for target, name in PAGES.items():
        text = page(name)
        exported = scrape_texts(text, text, 15.0, {"name": target, "url": f"http://{target}/metrics"})
        for key, value in exported.items():
            metric, _, rest = key.partition("{")
            labels = tuple(tuple(pair.split("=", 1)) for pair in rest.rstrip("}").split(",") if pair)
            found[(metric, labels)] = value  # type: ignore[index]
    return found


def test_gauge_rules_give_the_monitors_numbers_on_the_real_engines_pages() -> None:
    binary = require_binary("prometheus")
    with PageServer() as pages:
        scrape_configs = []
        for target, name in PAGES.items():
            pages.set(f"/{target}", Page(page(name)))
            url = httpx.URL(pages.url(f"/{target}"))
            scrape_configs.append({"job_name": target, "scrape_interval": "1s", "metrics_path": url.path,
                                   "static_configs": [{"targets": [f"{url.host}:{url.port}"],
                                                       "labels": {"target": target}}]})
        with PrometheusServer({}, interval="1s", binary=binary, scrape_configs=scrape_configs) as prom:
            deadline = time.monotonic() + 30
            while len(prom.query('up{target!=""} == 1')) < len(PAGES):
                assert time.monotonic() < deadline, "Prometheus did not scrape both pages"
                time.sleep(0.2)
            rules = gauge_rules()
            results = {rule.record: prom.query(expand(rule, rules)) for rule in rules
                       if rule.record not in CHECKED_ELSEWHERE}
    ours = _ours()
    compared = 0
    for record, result in results.items():
        theirs = {(record, tuple(sorted(r["metric"].items()))): float(r["value"][1]) for r in result}
        mine = {key: value for key, value in ours.items() if key[0] == record}
        assert set(theirs) == set(mine), record
        for key, value in theirs.items():
            assert value == pytest.approx(mine[key], rel=1e-12), key
            compared += 1
    # per rank: 3 gauges x 2 ranks x 2 engines; imbalance 2; waiting reasons 2; sleep states 3 + sleeping 1;
    # SGLang's acceptance 2
    assert compared == 12 + 2 + 2 + 4 + 2, compared
