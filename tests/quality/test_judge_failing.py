"""A judge that fails says so: the run is failed (no score), a metric and the shipped alert's inputs
show it, the overview's quality layer is failing, and `infermon quality run` exits 1. On the real
`openai` SDK against loopback judges that misbehave as real ones did (llama-server with a tiny model)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from monitor.config import Settings
from monitor.exporter import render_text
from monitor.quality.cli import run_command
from monitor.quality.store import QualityStore
from monitor.runtime import Monitor
from monitor.store.session import Store
from monitor.web.overview import overview
from monitor.web.terminal import exit_code
from tests.quality.helpers import DAY, make_samples, quality_settings
from tests.quality.judgeserver import JudgeScript, judge_server
from tests.support.appserver import serve_app

SAMPLES = 9


def seeded(tmp_path: Path, url: str, **judge: object) -> Settings:
    settings = quality_settings(tmp_path, url, sample_size=SAMPLES,
                                judge={"base_url": url, "model": "judge-test", "concurrency": 3, "timeout": "0.5s",
                                       "max_retries": 1, **judge})
    store = Store(settings.storage.url)
    QualityStore(store.engine).add_samples(make_samples(SAMPLES))
    store.close()
    return settings


def metrics_and_overview(settings: Settings) -> tuple[str, dict[str, object]]:
    monitor = Monitor(settings)

    async def read() -> tuple[str, dict[str, object]]:
        try:
            await monitor.quality.refresh()
            return render_text(monitor.registry).decode(), overview(monitor)
        finally:
            await monitor.aclose()

    return asyncio.run(read())


def firing_alerts(settings: Settings) -> dict[str, dict[str, str]]:
    """One cycle of a monitor with the shipped rules: {alertname: annotations} of what fires."""
    monitor = Monitor(settings)

    async def cycle() -> dict[str, dict[str, str]]:
        try:
            await monitor.quality.refresh()
            await monitor.run_once()
            assert monitor.alerting is not None
            return {a["labels"]["alertname"]: a["annotations"] for a in monitor.alerting.active()
                    if a["state"] == "firing"}
        finally:
            await monitor.aclose()

    return asyncio.run(cycle())


def test_a_judge_that_fails_every_verdict_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's run: a 400 about samplers, then timeouts, then malformed JSON."""
    script = JudgeScript(default="malformed", hang_s=2.0)
    script.script.extend(["reject_samplers", "hang", "hang", "hang", "hang"])
    with judge_server(script) as url:
        settings = seeded(tmp_path, url)
        assert run_command(settings, DAY, None, False) == 1
        err = capsys.readouterr().err
        assert "qwen3-8b: FAILED: the judge failed on 9 of 9 samples: the run has no score" in err
        assert run_command(settings, DAY, None, False) == 1  # asked again, the stored run is still a failed one
    assert all(body["max_tokens"] == 512 for body in script.bodies)
    page, view = metrics_and_overview(settings)
    assert 'inference_quality_run_failed{model="qwen3-8b"} 1.0' in page
    assert 'inference_quality_judge_error_ratio{model="qwen3-8b"} 1.0' in page  # QualityJudgeFailing's input
    assert "inference_quality_score_mean{" not in page  # no score: QualityScoreLow has nothing to judge
    cost = re.search(r"^inference_quality_judge_cost_usd_total (\S+)$", page, re.MULTILINE)
    assert cost is not None and float(cost.group(1)) > 0  # the failed answers were paid for: still counted
    layers = view["layers"]
    assert isinstance(layers, dict)
    assert layers["quality"]["state"] == "failing"
    assert layers["quality"]["detail"] == f"qwen3-8b run {DAY}: the judge failed on 9 of 9 samples"
    assert view["ok"] is False and exit_code(view) == 1  # `infermon status` exits 1
    firing = firing_alerts(settings)  # the shipped rules, the embedded evaluator
    assert "QualityJudgeFailing" in firing and "QualityScoreLow" not in firing
    assert firing["QualityJudgeFailing"]["probable_cause"].startswith(
        "judge_failing: the judge failed on 9 of 9 samples: the run's numbers are the judge's failure")


def test_schema_valid_junk_is_suspect_not_a_score_drop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Verdicts of 1 with empty reasons, every one valid JSON: the judge's failure, not the model's."""
    with judge_server(JudgeScript(default="junk")) as url:
        settings = seeded(tmp_path, url)
        assert run_command(settings, DAY, None, False) == 1
    out = capsys.readouterr()
    assert "9 suspect verdicts (not scored)" in out.out and "only 0 of 9 samples have a usable verdict" in out.err
    page, _ = metrics_and_overview(settings)
    assert 'inference_quality_judge_suspect_verdicts{model="qwen3-8b"} 9.0' in page
    assert 'inference_quality_judged_ratio{model="qwen3-8b"} 0.0' in page
    assert "inference_quality_score_mean{" not in page
    firing = firing_alerts(settings)
    assert "QualityJudgeFailing" in firing and not {"QualityScoreLow", "QualityScoreBelowBaseline"} & set(firing)


def test_the_report_page_says_the_run_failed(tmp_path: Path) -> None:
    with judge_server(JudgeScript(default="junk")) as url:
        settings = seeded(tmp_path, url)
        assert run_command(settings, DAY, None, False) == 1
    with serve_app(Monitor(settings)) as base:
        page = httpx.get(f"{base}/reports/quality/{DAY}", timeout=10, trust_env=False)
    assert page.status_code == 200
    assert "FAILED: only 0 of 9 samples have a usable verdict: the run has no score" in page.text
    assert "suspect verdicts<b>9</b>" in page.text


def test_one_verdict_for_everything_is_suspect(tmp_path: Path) -> None:
    with judge_server(JudgeScript(default="same")) as url:
        settings = seeded(tmp_path, url)
        assert run_command(settings, DAY, None, False) == 1
    page, _ = metrics_and_overview(settings)
    assert 'inference_quality_judge_suspect_verdicts{model="qwen3-8b"} 9.0' in page


def test_a_judge_that_needs_the_fallback_parser_is_a_good_run(tmp_path: Path) -> None:
    script = JudgeScript(default="reject_samplers")
    with judge_server(script) as url:
        settings = seeded(tmp_path, url)
        assert run_command(settings, DAY, None, False) == 0
    page, view = metrics_and_overview(settings)
    assert 'inference_quality_run_failed{model="qwen3-8b"} 0.0' in page and "inference_quality_score_mean{" in page
    layers = view["layers"]
    assert isinstance(layers, dict) and layers["quality"]["state"] == "ok"


def test_a_few_judge_errors_do_not_fail_the_run(tmp_path: Path) -> None:
    script = JudgeScript()
    script.script.extend(["500", "500"])  # one sample fails for good (max_retries 1): 1 of 9 is 11 %
    with judge_server(script) as url:
        settings = seeded(tmp_path, url, concurrency=1)
        assert run_command(settings, DAY, None, False) == 0
    page, _ = metrics_and_overview(settings)
    assert 'inference_quality_judge_errors{model="qwen3-8b"} 1.0' in page
    assert 'inference_quality_run_failed{model="qwen3-8b"} 0.0' in page
