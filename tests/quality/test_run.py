"""Run orchestration on a real SQLite file and the scripted judge: idempotency, sampling, baseline.
The tests that take `store_url` also run on a real PostgreSQL server."""

from __future__ import annotations

import asyncio
from pathlib import Path

from monitor.config import Settings
from monitor.quality.run import QualityRunner, RunReport
from monitor.quality.sources.requestlog import RequestLogSource
from monitor.quality.store import QualityStore
from monitor.store.session import Store
from tests.quality.helpers import DAY, days_before, make_samples, quality_settings
from tests.quality.judgeserver import JudgeScript, judge_server


def run(settings: Settings, day: str = DAY, force: bool = False, models: list[str] | None = None) -> RunReport:
    store = Store(settings.storage.url)
    try:
        quality = QualityStore(store.engine)
        runner = QualityRunner(settings.quality, quality, [RequestLogSource(quality)])
        return asyncio.run(runner.run(day, models=models, force=force))
    finally:
        store.close()


def seed(settings: Settings, samples: list) -> None:  # type: ignore[type-arg]
    store = Store(settings.storage.url)
    QualityStore(store.engine).add_samples(samples)
    store.close()


def test_second_run_makes_no_judge_call_unless_forced(tmp_path: Path, store_url: str) -> None:
    script = JudgeScript()
    with judge_server(script) as url:
        settings = quality_settings(tmp_path, url, store_url)
        assert settings.storage.url == store_url
        seed(settings, make_samples(30))
        first = run(settings)
        assert [(o.status, o.sampled, o.available) for o in first.outcomes] == [("judged", 20, 30)]
        assert script.calls == 20 and first.judge_calls == 20
        second = run(settings)
        assert [o.status for o in second.outcomes] == ["skipped"]
        assert script.calls == 20 and second.judge_calls == 0
        forced = run(settings, force=True)
        assert [o.status for o in forced.outcomes] == ["judged"] and script.calls == 40


def test_sampling_is_reproducible_for_a_date_and_says_when_short(tmp_path: Path) -> None:
    script = JudgeScript()
    with judge_server(script) as url:
        settings = quality_settings(tmp_path, url)
        seed(settings, make_samples(50) + make_samples(5, model="small-model", prefix="small"))
        report = run(settings)
        first_keys = _judged_prompts(script)
        outcomes = {o.model: o for o in report.outcomes}
        assert outcomes["qwen3-8b"].sampled == 20
        assert outcomes["small-model"].sampled == 5 and "only 5" in outcomes["small-model"].note
        script.bodies.clear()
        run(settings, force=True, models=["qwen3-8b"])
        assert _judged_prompts(script) == {k for k in first_keys if "small" not in k} and len(script.bodies) == 20


def _judged_prompts(script: JudgeScript) -> set[str]:
    return {b["messages"][0]["content"].split("###The user's request:\n")[1].split("\n")[0] for b in script.bodies}


def test_baseline_from_previous_days_gives_drift_numbers(tmp_path: Path, store_url: str) -> None:
    with judge_server(JudgeScript()) as url:
        settings = quality_settings(tmp_path, url, store_url, baseline_days=3)
        assert settings.storage.url == store_url
        for n in range(1, 4):  # three baseline days of ~60-token answers
            day = f"2026-11-{29 - n:02d}"
            seed(settings, make_samples(20, day_start=days_before(n), prefix=f"b{n}"))
            run(settings, day=day)
        seed(settings, make_samples(20, words=150))  # today: much longer answers
        run(settings)
        store = Store(settings.storage.url)
        summary = QualityStore(store.engine).done_runs("qwen3-8b", [DAY])[0].summary
        first = QualityStore(store.engine).done_runs("qwen3-8b", ["2026-11-28"])[0].summary
        store.close()
    import json

    # The first day had no earlier runs: no baseline, never one of its own few days.
    early = json.loads(first or "{}")
    assert early["baseline"] == "baseline warming up: 0 of 3 days" and early["psi"] is None
    assert early["baseline_score_mean"] is None
    numbers = json.loads(summary or "{}")
    assert numbers["baseline"] == "ready" and numbers["baseline_days_covered"] == 3
    assert numbers["baseline_output_tokens"]["count"] == 60
    assert numbers["psi"] > 0.25 and numbers["ks_pvalue"] < 0.05
    assert numbers["output_length_mean_change_ratio"] > 1.0
    assert numbers["baseline_score_mean"] is not None


def test_judge_errors_are_counted_never_scored(tmp_path: Path) -> None:
    script = JudgeScript()
    script.script.extend(["500"] * 4)  # with max_retries=1: the first two samples fail for good
    with judge_server(script) as url:
        settings = quality_settings(tmp_path, url, judge={"base_url": url, "concurrency": 1, "max_retries": 1})
        seed(settings, make_samples(5))
        report = run(settings)
    assert report.outcomes[0].judge_errors == 2
    store = Store(settings.storage.url)
    rows = QualityStore(store.engine).judgments(QualityStore(store.engine).done_runs()[0].id)
    store.close()
    failed = [r for r in rows if r.error]
    assert len(failed) == 2 and all(r.score is None and r.error == "HTTP 500: upstream died" for r in failed)


def test_a_broken_source_does_not_empty_the_others(tmp_path: Path) -> None:
    class Broken:
        name = "broken"

        async def samples(self, start: float, end: float) -> list:  # type: ignore[type-arg]
            raise OSError("disk gone")

    with judge_server(JudgeScript()) as url:
        settings = quality_settings(tmp_path, url)
        seed(settings, make_samples(3))
        store = Store(settings.storage.url)
        quality = QualityStore(store.engine)
        runner = QualityRunner(settings.quality, quality, [Broken(), RequestLogSource(quality)])
        report = asyncio.run(runner.run(DAY))
        store.close()
    assert report.source_errors == {"broken": "OSError: disk gone"}
    assert report.outcomes[0].sampled == 3


def test_a_save_the_store_refuses_ends_the_run_and_its_other_judge_calls(tmp_path: Path) -> None:
    """A verdict the store cannot save fails the run (resumable: the rest stays pending), and the
    other calls end with it: left running, they kept calling the judge on a client the run had
    closed, and saved into runs a forced re-run had already deleted."""
    script = JudgeScript(delay_s=0.05)
    with judge_server(script) as url:
        settings = quality_settings(tmp_path, url, judge={"base_url": url, "concurrency": 4})
        seed(settings, make_samples(20))
        store = Store(settings.storage.url)
        quality = QualityStore(store.engine)
        saved = 0

        def refusing(judgment_id: int, *args: object) -> None:
            nonlocal saved
            if saved == 3:
                raise OSError("disk full")
            saved += 1
            QualityStore.save_verdict(quality, judgment_id, *args)  # type: ignore[arg-type]

        quality.save_verdict = refusing  # type: ignore[method-assign]
        runner = QualityRunner(settings.quality, quality, [RequestLogSource(quality)])

        async def run_then_wait() -> int:
            try:
                await runner.run(DAY)
            except OSError:
                pass  # expected: the run says the store refused
            else:
                raise AssertionError("the run did not fail")
            left = asyncio.all_tasks() - {asyncio.current_task()}
            assert left == set(), left  # judge calls still running behind the failed run
            return script.calls

        calls = asyncio.run(run_then_wait())
        judged, sampled = quality.progress(quality.runs_on(DAY)[0].id)
        store.close()
    assert calls < 20 and (judged, sampled) == (3, 20)
