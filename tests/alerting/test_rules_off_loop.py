"""Under `infermon serve` the rules advance in the worker thread, never on the event loop: at
1,000 series matching a rule an evaluation took ~80 ms quiet and ~170 ms beside the scrapes,
a stall of /healthz every publish tick (bench.scale). The readers on the loop never wait for it:
they read the alerts the last evaluation left."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import httpx

from monitor.alerting.embedded import EmbeddedEvaluator
from monitor.alerting.readback import exposition_samples
from monitor.config import SHIPPED_RULE_FILES, load_settings
from monitor.rulefiles.rules import load_rules
from monitor.runtime import Monitor
from monitor.store.session import Store
from tests.alerting.helpers import wait_for
from tests.conftest import FIXTURES
from tests.support.appserver import serve_app
from tests.support.pageserver import Page, PageServer


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


def test_the_readers_never_wait_for_an_evaluation_in_progress(tmp_path: Path) -> None:
    # An evaluation holds the evaluator's lock in the worker thread (a long while at 20,000 alerts);
    # status, the alerts API, the overview and /metrics' render read what the last one left.
    path = tmp_path / "rules.yml"
    path.write_text("""groups:
  - name: g
    rules:
      - alert: Down
        expr: inference_target_up == 0
        labels: {severity: critical}
      - alert: Slow
        expr: inference_target_up == 1
        for: 1h
        labels: {severity: warning, layer: service}
""")
    evaluator = EmbeddedEvaluator(load_rules([path]), Store("sqlite://").engine)
    page = (b'# HELP inference_target_up x\n# TYPE inference_target_up gauge\n'
            b'inference_target_up{target="a"} 0.0\ninference_target_up{target="b"} 1.0\n'
            b'inference_target_up{target="c"} 0.0\n')
    assert evaluator.advance_page(page, 1000.0, 0.0) is not None
    held, release = threading.Event(), threading.Event()

    def evaluating() -> None:
        with evaluator.lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=evaluating)
    holder.start()
    assert held.wait(10)
    read: dict[str, Any] = {}

    def readers() -> None:
        read.update(active=evaluator.active(), first=evaluator.active(limit=2), counts=evaluator.counts(),
                    status=evaluator.status(), severity=evaluator.firing_by_severity(), metric=evaluator.render())

    reader = threading.Thread(target=readers)
    reader.start()
    reader.join(10)
    done = not reader.is_alive()
    release.set()
    holder.join(10)
    reader.join(10)
    assert done, "a reader waited for the evaluation's lock"
    assert sorted((a["labels"]["alertname"], a["labels"]["target"], a["state"]) for a in read["active"]) == [
        ("Down", "a", "firing"), ("Down", "c", "firing"), ("Slow", "b", "pending")]
    assert [(a["labels"]["alertname"], a["state"]) for a in read["first"]] == [("Down", "firing")] * 2
    assert read["counts"] == {("", "Down", "firing"): 2, ("service", "Slow", "pending"): 1}
    assert (read["status"]["firing"], read["status"]["pending"]) == (2, 1)
    assert read["severity"] == {"critical": 2, "warning": 0}
    assert asyncio.run(evaluator.active_in_turns()) == read["active"]  # the alerts API's, made in turns
    assert {s.labels["severity"]: s.value for s in read["metric"].samples} == {"critical": 2.0, "warning": 0.0}
    # The next evaluation's alerts are what the readers see next: a is up again, b down.
    later = page.replace(b'"a"} 0.0', b'"a"} 1.0').replace(b'"b"} 1.0', b'"b"} 0.0')
    assert evaluator.advance_page(later, 1001.0, 0.0) is not None
    assert sorted((a["labels"]["alertname"], a["labels"]["target"], a["state"]) for a in evaluator.active()) == [
        ("Down", "b", "firing"), ("Down", "c", "firing"), ("Slow", "a", "pending")]
