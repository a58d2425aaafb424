"""The served monitor: ingestion (auth, validation, limits, redaction), runs as JSON, metrics, report."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
from pydantic import SecretStr

from monitor.app import create_app
from monitor.config import Settings
from monitor.quality.layer import build_sources
from monitor.quality.run import QualityRunner
from monitor.quality.store import QualityStore
from monitor.runtime import Monitor
from monitor.store.session import Store
from tests.quality.helpers import DAY, DAY_START, iso, make_samples, quality_settings
from tests.quality.judgeserver import JudgeScript, judge_server
from tests.support.appserver import serve_app, serve_asgi

TOKEN = {"Authorization": "Bearer tok-123"}
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")


def settings_for(tmp_path: Path, judge_url: str, **quality: object) -> Settings:
    settings = quality_settings(tmp_path, judge_url, refresh_interval="1s", **quality)
    return settings.model_copy(update={"api": settings.api.model_copy(update={"token": SecretStr("tok-123")})})


def samples_payload(count: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(count):
        out.append({
            "model": "qwen3-8b",
            "prompt": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": f"My e-mail is user{i}@example.com, question {i}?"}],
            "response": f"Sure, I will write to user{i}@example.com. " + "detail " * (20 + i),
            "context": [f"passage {i}", "another passage"],
            "timestamp": iso(DAY_START + 600 * i), "output_tokens": 25 + i, "request_id": f"req-{i}",
        })
    out.append({"model": "qwen3-8b", "prompt": "Tell me a secret.",
                "response": "I'm sorry, but I can't help with that.",
                "timestamp": iso(DAY_START + 99)})
    return out


def run_day(settings: Settings) -> None:
    store = Store(settings.storage.url)
    quality = QualityStore(store.engine)
    asyncio.run(QualityRunner(settings.quality, quality, build_sources(settings.quality, quality)).run(DAY))
    store.close()


def test_ingest_run_and_serve(tmp_path: Path) -> None:
    script = JudgeScript()
    with judge_server(script) as judge_url:
        settings = settings_for(tmp_path, judge_url)
        with serve_app(Monitor(settings)) as url, httpx.Client(base_url=url, timeout=10) as client:
            payload = samples_payload(12)
            assert client.post("/api/v1/samples", json=payload).status_code == 401
            answer = client.post("/api/v1/samples", json=payload, headers=TOKEN)
            assert answer.status_code == 202 and answer.json() == {"accepted": 13, "stored": 13, "duplicates": 0}
            again = client.post("/api/v1/samples", json=payload[0], headers=TOKEN).json()
            assert again == {"accepted": 1, "stored": 0, "duplicates": 1}
            assert "quality_score_mean" not in client.get("/metrics").text

            run_day(settings)  # as `infermon quality run` in another process would
            text = _wait_for_metric(client, 'inference_quality_score_mean{model="qwen3-8b"}')
            assert 'inference_quality_samples{model="qwen3-8b"} 13.0' in text
            assert 'inference_quality_output_tokens{model="qwen3-8b",quantile="0.95"}' in text
            assert 'inference_quality_output_tokens_count{model="qwen3-8b"} 13.0' in text
            assert 'inference_quality_last_run_age_seconds{model="qwen3-8b"}' in text
            assert "inference_quality_judge_cost_usd_total" in text

            run_json = client.get(f"/api/v1/quality/runs/{DAY}").json()["models"]["qwen3-8b"]
            assert run_json["samples"] == 13 and run_json["judge_errors"] == 0
            assert run_json["refusal_ratio"] == pytest.approx(1 / 13)
            assert set(run_json["score_histogram"]) == {"1", "2", "3", "4", "5"}
            assert run_json["judge_cost_usd"] == pytest.approx(13 * (1000 * 1.25 + 50 * 10) / 1e6)
            for key in ("hallucination_ratio", "output_tokens", "psi", "ks_pvalue", "refusal_ratio_ci95"):
                assert key in run_json
            listing = client.get("/api/v1/quality/runs").json()["runs"]
            assert listing[0]["date"] == DAY and listing[0]["models"]["qwen3-8b"]["samples"] == 13
            assert client.get("/api/v1/quality/runs/2020-01-01").status_code == 404
            assert client.get("/api/v1/quality/runs/yesterday").status_code == 400

            page = client.get(f"/reports/quality/{DAY}")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert page.text.count("<svg") == 2 and "Lowest scored" in page.text and "Refused" in page.text
            assert "I&#x27;m sorry, but I can&#x27;t help" in page.text  # the refused answer, escaped
            assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page.text)  # nothing fetched from outside
            # not a dead end: back to the overview and to the index of runs, which lists this one
            assert '<a href="/">' in page.text and '<a href="/reports/quality">' in page.text
            assert 'name="viewport"' in page.text and 'viewBox="0 0' in page.text  # phones: charts scale
            index = client.get("/reports/quality")
            assert index.status_code == 200 and index.headers["content-type"].startswith("text/html")
            assert f'<a href="/reports/quality/{DAY}">{DAY}</a>' in index.text and "qwen3-8b" in index.text

    # No e-mail address reached the judge or the database.
    assert script.calls == 13
    assert not any(EMAIL.search(b["messages"][0]["content"]) for b in script.bodies)
    assert any("[REDACTED:email]" in b["messages"][0]["content"] for b in script.bodies)  # (judged in a drawn order)
    database = Path(settings.storage.url.removeprefix("sqlite:///"))
    with sqlite3.connect(database) as connection:
        dump = "\n".join(connection.iterdump())
    assert "example.com" not in dump and "[REDACTED:email]" in dump


def _wait_for_metric(client: httpx.Client, needle: str) -> str:
    deadline = time.monotonic() + 15
    while True:
        text = client.get("/metrics").text
        if needle in text:
            return text
        assert time.monotonic() < deadline, f"{needle} never appeared"
        time.sleep(0.2)


@pytest.mark.parametrize(("body", "status", "reason"), [
    ({"model": "m", "prompt": "p"}, 422, "response"),
    ({"model": "m", "prompt": "p", "response": "r", "timestamp": "2026-11-29T08:00:00"}, 422, "time zone"),
    ({"model": "m", "prompt": "p", "response": "r", "surprise": 1}, 422, "surprise"),
    ({"model": "m", "prompt": "p", "response": "r" * 2000}, 422, "longer than"),
    ([], 422, "1 to 1000"),
])
def test_bad_samples_are_refused_with_the_reason(tmp_path: Path, body: object, status: int, reason: str) -> None:
    settings = settings_for(tmp_path, "http://127.0.0.1:9/v1", max_text_chars=1000)
    with serve_app(Monitor(settings)) as url:
        answer = httpx.post(f"{url}/api/v1/samples", json=body, headers=TOKEN)
    assert answer.status_code == status and reason in answer.text


def test_too_large_and_not_json(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, "http://127.0.0.1:9/v1", max_body_bytes=1000)
    with serve_app(Monitor(settings)) as url:
        big = httpx.post(f"{url}/api/v1/samples", content=b"[" + b" " * 2000 + b"]", headers=TOKEN)
        assert big.status_code == 413
        assert httpx.post(f"{url}/api/v1/samples", content=b"{nope", headers=TOKEN).status_code == 400


def test_daily_run_is_a_cron_job_in_the_configured_zone(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, "http://127.0.0.1:9/v1", timezone="Asia/Shanghai", schedule="0 2 * * *")
    monitor = Monitor(settings)
    app = create_app(monitor)
    with serve_asgi(app) as url:
        job = app.state.scheduler.get_job("quality_run")
        assert job is not None
        due = job.next_run_time.astimezone(ZoneInfo("Asia/Shanghai"))
        assert (due.hour, due.minute) == (2, 0)
        assert 0 < (due - datetime.now(UTC)).total_seconds() <= 86400
        assert httpx.get(f"{url}/readyz").status_code in (200, 503)
        status = httpx.get(f"{url}/api/v1/status").json()["layers"]["quality"]
        assert status["schedule"] == "0 2 * * *" and status["timezone"] == "Asia/Shanghai"


def test_the_scheduled_job_runs_the_previous_day_in_the_serving_process(tmp_path: Path) -> None:
    script = JudgeScript()
    with judge_server(script) as judge_url:
        settings = settings_for(tmp_path, judge_url, timezone="Asia/Shanghai")
        monitor = Monitor(settings)
        yesterday = (datetime.now(ZoneInfo("Asia/Shanghai")).date() - timedelta(days=1)).isoformat()
        start = datetime.fromisoformat(f"{yesterday}T12:00:00+08:00").timestamp()
        monitor.quality.store.add_samples(make_samples(6, day_start=start))
        app = create_app(monitor)
        with serve_asgi(app) as url, httpx.Client(base_url=url, timeout=10) as client:
            app.state.scheduler.get_job("quality_run").modify(next_run_time=datetime.now(UTC))  # due now
            text = _wait_for_metric(client, 'inference_quality_samples{model="qwen3-8b"} 6.0')
            assert 'inference_monitor_collector_success{collector="quality_run",target=""} 1.0' in text
            assert client.get(f"/api/v1/quality/runs/{yesterday}").json()["models"]["qwen3-8b"]["status"] == "done"
    assert script.calls == 6


def test_two_runs_of_one_day_at_once_run_one_after_the_other(tmp_path: Path) -> None:
    """The daily job and an operator's forced re-run of the same day at once: the second waits for
    the first. Overlapping, the forced run deleted the judgments the first was still updating
    (StaleDataError, the run job counted as failing)."""
    script = JudgeScript(delay_s=0.02)
    with judge_server(script) as judge_url:
        monitor = Monitor(settings_for(tmp_path, judge_url))
        monitor.quality.store.add_samples(make_samples(20))

        async def both() -> list[object]:
            try:
                return await asyncio.gather(monitor.quality.run(DAY), monitor.quality.run(DAY, force=True),
                                            return_exceptions=True)
            finally:
                await monitor.aclose()

        reports = asyncio.run(both())
    assert not [r for r in reports if isinstance(r, BaseException) or r is None], reports  # None: the run failed
    assert monitor.health.entries[("quality_run", "")].success, monitor.health.entries[("quality_run", "")].error
    statuses = [[o.status for o in r.outcomes] for r in reports]  # type: ignore[union-attr]
    assert statuses == [["judged"], ["judged"]], statuses
    # Both judged all 20, the forced one after the first: the first 20 calls are 20 different samples.
    assert script.calls == 40
    first = [b["messages"][-1]["content"] for b in script.bodies[:20]]
    assert len(set(first)) == 20


def test_a_run_on_an_in_memory_store_beside_the_collection_cycles(tmp_path: Path) -> None:
    """`sqlite://` is one connection (StaticPool) that every thread shares. The run's verdict
    writer thread used it while the loop read the same connection for the collection cycles: the
    commits interleaved (StaleDataError on quality_judgments, "cannot commit transaction - SQL
    statements in progress", two SpendPoints flushed with one id) and the run failed."""
    script = JudgeScript(delay_s=0.005)
    with judge_server(script) as judge_url:
        settings = settings_for(tmp_path, judge_url)
        memory = settings.storage.model_copy(update={"url": "sqlite://"})
        monitor = Monitor(settings.model_copy(update={"storage": memory}))
        assert monitor.store.memory
        monitor.quality.store.add_samples(make_samples(40))
        reads = 0

        async def beside() -> None:
            nonlocal reads
            run = asyncio.create_task(monitor.quality.run(DAY))
            try:
                while not run.done():  # what the cycles do on the loop thread meanwhile
                    await monitor.quality.refresh()
                    monitor.quality.store.progress(1)
                    reads += 1
                    await asyncio.sleep(0)
                await run
            finally:
                await monitor.aclose()

        asyncio.run(beside())
    assert reads > 10
    entry = monitor.health.entries[("quality_run", "")]
    assert entry.success, entry.error
    report = monitor.quality.last_report
    assert report is not None and [o.status for o in report.outcomes] == ["judged"]
    judged, sampled = monitor.quality.store.progress(1)
    assert judged == sampled == settings.quality.sample_size, (judged, sampled)
    assert report.outcomes[0].failed is None, report.outcomes[0].failed
