"""Fleets behind a router, read in the engines' schema: NVIDIA Dynamo's frontend and the Gateway API
Inference Extension's endpoint picker (llm-d). Pages from tests/service/routerpages.py, served on
loopback and scraped twice; quantiles are histogram_quantile's over the buckets' rate()."""

from __future__ import annotations

import pytest

from monitor.service.engines import detect
from tests.service.pairscrape import scrape
from tests.service.routerpages import MODEL, DynamoFrontend, EndpointPicker, log_buckets


def test_dynamo_buckets_are_its_log_spaced_defaults() -> None:
    assert log_buckets(1.0, 256.0, 10) == (1.0, 1.9, 3.4, 6.3, 12.0, 22.0, 40.0, 75.0, 140.0, 260.0)


def test_dynamo_frontend_in_the_engine_schema() -> None:
    frontend = DynamoFrontend()
    frontend.serve(ttft=[0.12] * 180 + [0.9] * 20, itl=[0.015] * 2000, durations=[4.0] * 200, errors=4)
    first = frontend.page(inflight=12, queued=3)
    frontend.serve(ttft=[0.12] * 90 + [0.9] * 10, itl=[0.015] * 900 + [0.06] * 100, durations=[4.0] * 100, errors=2)
    got = scrape(first, frontend.page(inflight=16, queued=5))
    spec = detect(first)
    assert spec is not None and (spec.engine, spec.generation) == ("dynamo", "frontend")
    labels = {"model": MODEL, "window": "1m"}
    for metric, base in (("inference_ttft_seconds", "dynamo_frontend_time_to_first_token_seconds"),
                         ("inference_tpot_seconds", "dynamo_frontend_inter_token_latency_seconds"),
                         ("inference_e2e_latency_seconds", "dynamo_frontend_request_duration_seconds")):
        for q in (0.5, 0.99):
            assert got.one(metric, quantile=f"{q:g}", **labels) == pytest.approx(got.quantile(q, base), rel=1e-12)
    assert got.one("inference_requests_per_second", **labels) == pytest.approx(
        got.rate("dynamo_frontend_requests_total"), rel=1e-12)
    assert got.one("inference_request_error_ratio", **labels) == pytest.approx(2 / 102, rel=1e-9)
    assert got.one("inference_requests_running", model=MODEL) == 16
    assert got.one("inference_requests_waiting", model=MODEL) == 5


def test_endpoint_picker_in_the_engine_schema() -> None:
    picker = EndpointPicker()
    picker.serve(durations=[2.5] * 300, ntpot=[0.03] * 300, errors=6)
    first = picker.page(running=20, queued=(1, 2))
    picker.serve(durations=[2.5] * 140 + [9.0] * 10, ntpot=[0.03] * 140 + [0.2] * 10, errors=3)
    got = scrape(first, picker.page(running=24, queued=(4, 3)))
    spec = detect(first)
    assert spec is not None and spec.engine == "gaie-epp"
    labels = {"model": MODEL, "window": "1m"}
    for metric, base in (("inference_e2e_latency_seconds", "inference_objective_request_duration_seconds"),
                         ("inference_tpot_seconds", "inference_objective_normalized_time_per_output_token_seconds")):
        assert got.one(metric, quantile="0.99", **labels) == pytest.approx(got.quantile(0.99, base), rel=1e-12)
    assert got.one("inference_request_error_ratio", **labels) == pytest.approx(3 / 150, rel=1e-9)
    assert got.one("inference_requests_running", model=MODEL) == 24
    # The pool's queue has no model label: the target's model, here unknown, holds it.
    assert sum(v for labels_, v in got.exported["inference_requests_waiting"]) == 7
    assert "inference_ttft_seconds" not in got.exported  # no TTFT at the router: the canary's
