"""Under `infermon serve` the rules advance in the worker thread, never on the event loop: at
1,000 series matching a rule an evaluation took ~80 ms quiet and ~170 ms beside the scrapes,
a stall of /healthz every publish tick (bench.scale). The readers on the loop take its lock."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from monitor.alerting.embedded import EmbeddedEvaluator
from monitor.alerting.readback import exposition_samples
from monitor.alerting.rules import load_rules
from monitor.config import SHIPPED_RULE_FILES, load_settings
from monitor.runtime import Monitor
from monitor.store.session import Store
from tests.alerting.helpers import wait_for
from tests.appserver import serve_app
from tests.conftest import FIXTURES
from tests.pageserver import Page, PageServer


def test_served_rules_advance_in_the_worker_thread_and_the_api_reads_them() -> None:
    with PageServer() as pages:
        pages.set("/metrics", Page((FIXTURES / "sample_vllm_v1.prom").read_text()))
        monitor = Monitor(load_settings(None, {
            "service": {"scrape_interval": "1s", "targets": [{"name": "vllm-a", "url": pages.url("/metrics")}]},
            "infra": {"nvml": {"enabled": "false"}, "interval": "1s"},
        }))
        assert monitor.alerting is not None
        threads: list[str] = []
        advance = monitor.alerting.advance

        def spied(*args: Any, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            return advance(*args, **kwargs)

        monitor.alerting.advance = spied  # type: ignore[method-assign]
        with serve_app(monitor) as url, httpx.Client(base_url=url, timeout=10) as client:
            wait_for(lambda: threads.count("infermon-cpu_0") >= 3)
            status = client.get("/api/v1/status").json()
            alerts = client.get("/api/v1/alerts")
    # On the loop only before the first page is published (on the registry, at start-up).
    published = threads[threads.index("infermon-cpu_0"):]
    assert set(published) == {"infermon-cpu_0"}, threads
    assert status["alerting"]["last_evaluation"] is not None and status["alerting"]["errors"] == []
    assert alerts.status_code == 200


def test_the_read_back_keeps_series_dicts_and_equals_a_fresh_read() -> None:
    rules = load_rules([Path(__file__).resolve().parents[2] / "alerts" / f"{name}.yml" for name in SHIPPED_RULE_FILES])
    evaluator = EmbeddedEvaluator(rules, Store("sqlite://").engine)
    first = (b'# HELP inference_target_up x\n# TYPE inference_target_up gauge\n'
             b'inference_target_up{target="a"} 1.0\ninference_target_up{target="b"} 0.0\n'
             b'# HELP inference_request_error_ratio x\n# TYPE inference_request_error_ratio gauge\n'
             b'inference_request_error_ratio{model="m",target="a",window="5m"} 0.5\n'
             b'inference_request_error_ratio{model="m",window="5m"} 0.25\n')
    second = first.replace(b"} 0.5", b"} 0.75").replace(b'target="b"} 0.0', b'target="c"} 1.0')
    moved = first.replace(b"} 0.5", b"} 0.6")  # the same series, a value moved: the kept layout, new values
    for body in (first, first, moved, second, second, first, moved):
        assert evaluator._read_back(body) == exposition_samples(body, evaluator.metrics)
    again = evaluator._read_back(first)["inference_target_up"][0][0]
    assert again is evaluator._read_back(second)["inference_target_up"][0][0]  # kept, not built again
    assert dict(again) == {"target": "a", "__name__": "inference_target_up"}
    fleet = evaluator._read_back(first)["inference_request_error_ratio"][1][0]
    assert "target" not in fleet and fleet["window"] == "5m"
