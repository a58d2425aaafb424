"""`infermon history import` asks a few range queries at once: the stored history is the same as
one query after another, never more than `concurrency` are in flight, and a selector another one
covers is not asked for."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from monitor.config import HistorySettings
from monitor.history.importer import HistoryImportError, covering, import_prometheus, selector_text
from monitor.history.keeper import Wanted, wanted_of
from monitor.history.store import HistoryTables, StoredDay
from monitor.rulefiles.promql import Matcher
from monitor.rulefiles.rules import SHIPPED_DIR, load_rules
from monitor.store.session import Store
from tests.conftest import require_binary
from tests.history.worlds import DAY, World, creeping, openmetrics, seasonal
from tests.support.promserver import PrometheusServer

pytestmark = pytest.mark.prometheus

LIMIT = 4


class Counting(httpx.BaseTransport):
    """Counts the requests in flight; the first LIMIT wait for each other (a barrier), so the import
    must have sent them at once, or the test fails on the barrier's timeout."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.lock = threading.Lock()
        self.in_flight = self.most = self.sent = 0
        self.barrier = threading.Barrier(LIMIT, timeout=20)
        self.queries: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.in_flight += 1
            self.sent += 1
            first = self.sent <= LIMIT
            self.most = max(self.most, self.in_flight)
            self.queries.append(request.url.params["query"])
        try:
            if first:
                self.barrier.wait()
            response = self.inner.handle_request(request)
            response.read()
            return response
        finally:
            with self.lock:
                self.in_flight -= 1

    def close(self) -> None:
        self.inner.close()


def labels(target: str, window: str) -> tuple[tuple[str, str], ...]:
    return (("model", "m"), ("quantile", "0.99"), ("target", target), ("window", window))


def worlds(end: float) -> list[World]:
    series = {labels(f"gpu-{i}:8000", window): creeping(seasonal(0.3 + i / 10), end - 3 * DAY, 0.04)
              for i in range(3) for window in ("1m", "5m")}
    return [World(name, series) for name in ("inference_ttft_seconds", "inference_tpot_seconds",
                                              "inference_e2e_latency_seconds", "inference_queue_time_seconds")]


def stored(url: str) -> dict[tuple[str, str, int], np.ndarray]:
    store = Store(url)
    try:
        days: list[StoredDay] = HistoryTables(store.engine).read(0)
    finally:
        store.close()
    return {(d.name, str(sorted(d.labels.items())), d.day): d.points for d in days}


def test_overlapped_queries_store_what_one_at_a_time_does_with_at_most_four_in_flight(tmp_path: Path) -> None:
    end = time.time() - 30
    source = tmp_path / "weeks.om"
    source.write_text(openmetrics(worlds(end), end - 16 * DAY, end))
    prom = PrometheusServer({}, binary=require_binary("prometheus"), retention="60d")
    subprocess.run([require_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics",
                    "--max-block-duration=24h", str(source), str(prom.dir / "data")], check=True, capture_output=True)
    wanted = wanted_of(load_rules(sorted(SHIPPED_DIR.glob("*.yml"))), HistorySettings().series)
    asked = covering(wanted)
    assert len(asked) < len(wanted)  # the overlapping selectors are asked for once
    results = {}
    with prom:
        for concurrency in (1, LIMIT):
            url = f"sqlite:///{tmp_path / f'c{concurrency}.db'}"
            counting = Counting(httpx.HTTPTransport())
            counting.barrier = threading.Barrier(concurrency, timeout=20)
            store = Store(url)
            with httpx.Client(base_url=prom.url, transport=counting) as client:
                done = import_prometheus(client, wanted, end - 16 * DAY, end, HistoryTables(store.engine),
                                         concurrency=concurrency)
            store.close()
            assert counting.most == concurrency and counting.sent == len(asked)
            assert sorted(set(counting.queries)) == sorted(f"avg_over_time({selector_text(w)}[299s])" for w in asked)
            results[concurrency] = (done.series, done.points, done.days, stored(url))
    one, four = results[1], results[LIMIT]
    assert one[:3] == four[:3] and one[0] == 4 * 3  # four metrics of three targets on 5m (1m is not kept)
    assert one[3].keys() == four[3].keys()
    for key, points in one[3].items():
        np.testing.assert_array_equal(points, four[3][key])


def test_a_failed_query_fails_the_import_and_stores_nothing(tmp_path: Path) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if "tpot" in request.url.params["query"]:
            return httpx.Response(400, json={"status": "error", "error": "bad_data: no"})
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"__name__": "x", "target": "a"}, "values": [[1_780_000_200, "1.5"]]}]}})

    wanted = [Wanted(name, (Matcher("window", "=", "5m"),)) for name in
              ("inference_ttft_seconds", "inference_tpot_seconds", "inference_e2e_latency_seconds")]
    store = Store(f"sqlite:///{tmp_path / 'h.db'}")
    with httpx.Client(base_url="http://prometheus", transport=httpx.MockTransport(answer)) as client, \
            pytest.raises(HistoryImportError, match=r"HTTP 400.*bad_data"):
        import_prometheus(client, wanted, 1_780_000_000, 1_780_000_600, HistoryTables(store.engine))
    assert HistoryTables(store.engine).read(0) == []
    store.close()


def test_covering_keeps_the_wider_selector_once() -> None:
    wide = Wanted("m", (Matcher("window", "=", "5m"),))
    narrow = Wanted("m", (Matcher("window", "=", "5m"), Matcher("target", "!=", "")))
    same_wide = Wanted("m", (Matcher("window", "=", "5m"),), days=0)
    other = Wanted("n", (Matcher("window", "=", "5m"), Matcher("target", "!=", "")))
    assert covering([narrow, wide, same_wide, other]) == [wide, other]
    p99 = Wanted("m", (Matcher("quantile", "=", "0.99"), Matcher("window", "=", "5m")))
    both = Wanted("m", (Matcher("window", "=", "5m"), Matcher("quantile", "=~", "0.5|0.99")))
    p95 = Wanted("m", (Matcher("quantile", "=", "0.95"), Matcher("window", "=", "5m")))
    assert covering([p99, both, p95]) == [both, p95]
