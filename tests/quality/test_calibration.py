"""The judge earns its verdicts: known answers judged blind in every run, on a real HTTP judge on loopback.

A random judge (well-formed verdicts, fluent reasons, random scores) fails the run with no model
figure on /metrics, `infermon quality run` exits 1, the layer and the shipped alert say why; an
honest judge passes with exactly the model's samples counted. The gold sets here are written for
these tests (a held-out set besides the shipped one)."""

from __future__ import annotations

import asyncio
import json
import random
import re
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest
from rich.console import Console

from monitor.config import ConfigError, JudgeSettings, Settings
from monitor.exporter import render_text
from monitor.quality.calibration import (
    SHIPPED_GOLD,
    Agreement,
    GoldSetError,
    GoldVerdict,
    agreement,
    expected,
    load_gold,
    quadratic_kappa,
    uncalibrated,
)
from monitor.quality.checks import Judged, summarise
from monitor.quality.cli import run_command
from monitor.quality.drift import judge_changed
from monitor.quality.judge import TEMPLATE_SHA256
from monitor.quality.report import ModelReport, render_report
from monitor.quality.store import QualityJudgment, QualityRun, QualityStore
from monitor.quality.summary import QualitySummary
from monitor.runtime import Monitor
from monitor.settings_check import check_settings
from monitor.store.session import Store
from monitor.web.overview import overview
from monitor.web.terminal import exit_code, print_overview
from tests.quality.helpers import DAY, days_before, iso, make_samples, quality_settings
from tests.quality.judgeserver import _RESPONSE, JudgeScript, judge_server
from tests.support.appserver import serve_app

SAMPLES = 12
_CJK = re.compile(r"[\u4e00-\u9fff]")


def held_out_gold(path: Path) -> dict[str, dict[str, object]]:
    """A gold set unlike the shipped one: arithmetic questions whose answers are right, off or absurd."""
    rng = random.Random(42)
    known: dict[str, dict[str, object]] = {}
    lines = []
    for i in range(20):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        score = i % 5 + 1
        answer = {5: f"{a} + {b} = {a + b}.", 4: f"It is {a + b}.", 3: f"Roughly {a + b + 1}, give or take.",
                  2: f"{a} + {b} is {a + b + 10}.", 1: f"{a} + {b} equals {a * b * 7}, as proven in 1066."}[score]
        item = {"prompt": f"What is {a} + {b}?", "response": answer, "score": score, "refusal": False,
                "hallucination": score == 1}
        lines.append(json.dumps(item))
        known[answer] = {"score": score, "refusal": False, "hallucination": score == 1,
                         "reason": "The sum is checked against the arithmetic."}
    path.write_text("\n".join(lines) + "\n")
    return known


def seeded(tmp_path: Path, url: str, **judge: object) -> Settings:
    settings = quality_settings(tmp_path, url, sample_size=SAMPLES,
                                judge={"base_url": url, "model": "judge-test", "concurrency": 4, "timeout": "5s",
                                       "max_retries": 1, "calibration": None, **judge})
    store = Store(settings.storage.url)
    QualityStore(store.engine).add_samples(make_samples(SAMPLES))
    store.close()
    return settings


def stored_summary(settings: Settings) -> QualitySummary:
    store = Store(settings.storage.url)
    try:
        run = QualityStore(store.engine).run(DAY, "qwen3-8b")
        assert run is not None
        return QualitySummary.from_stored(run.summary)
    finally:
        store.close()


def page_and_overview(settings: Settings) -> tuple[str, dict[str, object]]:
    monitor = Monitor(settings)

    async def read() -> tuple[str, dict[str, object]]:
        try:
            await monitor.quality.refresh()
            await monitor.run_once()
            return render_text(monitor.registry).decode(), overview(monitor)
        finally:
            await monitor.aclose()

    return asyncio.run(read())


def judged_responses(script: JudgeScript) -> list[str]:
    out = []
    for body in script.bodies:
        match = _RESPONSE.search(body["messages"][0]["content"])
        assert match is not None
        out.append(match.group(1))
    return out


# ---- the numbers ------------------------------------------------------------------------------

def test_quadratic_kappa_equals_its_closed_form() -> None:
    """With quadratic weights kappa is 2 cov(a, b) / (var a + var b + (mean a - mean b)^2) (population
    moments): an independent formula to check the confusion-matrix one against."""
    rng = random.Random(7)
    for _ in range(50):
        a = [rng.randint(1, 5) for _ in range(40)]
        b = [min(5, max(1, x + rng.choice([-2, -1, 0, 0, 1]))) for x in a]
        x, y = np.asarray(a, float), np.asarray(b, float)
        closed = 2 * np.mean((x - x.mean()) * (y - y.mean())) / (x.var() + y.var() + (x.mean() - y.mean()) ** 2)
        assert quadratic_kappa(a, b) == pytest.approx(closed)
    assert quadratic_kappa([1, 2, 3, 4, 5], [1, 2, 3, 4, 5]) == 1.0
    assert quadratic_kappa([1, 2, 3, 4, 5], [3, 3, 3, 3, 3]) == pytest.approx(0.0)  # one answer for all: chance
    assert quadratic_kappa([3, 3], [3, 3]) is None  # no disagreement possible by chance: undefined


def test_agreement_counts_flags_only_where_the_gold_set_gives_them() -> None:
    graded = [GoldVerdict(5, False, None, 5, False, True), GoldVerdict(1, True, True, 2, False, True),
              GoldVerdict(3, None, False, None, None, None)]
    found = agreement(graded)
    assert (found.items, found.answered, found.exact_ratio, found.within_one_ratio) == (3, 2, 0.5, 1.0)
    assert found.refusal_agreement == 0.5 and found.hallucination_agreement == 1.0 and found.bias == 0.5


def test_the_shipped_gold_set() -> None:
    items = load_gold(SHIPPED_GOLD)
    assert len(items) >= 30
    assert {i.score for i in items} == {1, 2, 3, 4, 5}
    assert any(i.refusal for i in items) and any(i.hallucination for i in items)
    chinese = [i for i in items if _CJK.search(i.prompt)]
    assert 10 <= len(chinese) <= len(items) - 10  # both languages, in earnest
    assert all(expected(i.key) == (i.score, i.refusal, i.hallucination) for i in items)


@pytest.mark.parametrize(("line", "why"), [
    ('{"prompt": "q", "response": "a", "score": 6}', "integer from 1 to 5"),
    ('{"prompt": "q", "response": "a", "score": 3, "refusal": "no"}', "`refusal` must be true or false"),
    ('{"prompt": "q", "response": "a", "score": 3, "verdict": 1}', "unknown keys ['verdict']"),
    ("not json", "not JSON"),
])
def test_a_bad_gold_set_is_refused_at_start_with_its_line(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "gold.jsonl"
    held_out_gold(path)
    path.write_text(path.read_text() + line + "\n")
    with pytest.raises(GoldSetError, match=re.escape("gold.jsonl:21: ") + ".*" + re.escape(why)):
        load_gold(path)
    settings = quality_settings(tmp_path, "http://127.0.0.1:9/v1", judge={"base_url": "http://127.0.0.1:9/v1",
                                                                           "calibration": str(path)})
    with pytest.raises(ConfigError, match=re.escape("quality.judge.calibration")):
        check_settings(settings)


# ---- runs against a judge on loopback -----------------------------------------------------------

def test_an_honest_judge_passes_with_exactly_the_models_samples_counted(tmp_path: Path) -> None:
    script = JudgeScript()
    script.models = ["judge-test", "another"]
    script.fingerprint = "fp_honest"
    with judge_server(script) as url:
        settings = seeded(tmp_path, url)
        assert run_command(settings, DAY, None, False) == 0
    gold = load_gold(SHIPPED_GOLD)
    judged = judged_responses(script)
    assert len(judged) == SAMPLES + len(gold)  # every known answer judged, once, with the samples
    assert {i.response for i in gold} <= set(judged)
    positions = [n for n, text in enumerate(judged) if text in {i.response for i in gold}]
    assert positions[0] < SAMPLES and positions[-1] >= SAMPLES  # shuffled among them, not a block
    # Blind: every request has the same shape, and nothing in it names a known answer.
    assert len({tuple(sorted(body)) for body in script.bodies}) == 1
    assert all("(none)" in body["messages"][0]["content"] and "gold" not in body["messages"][0]["content"]
               for body in script.bodies)
    summary = stored_summary(settings)
    assert (summary.sampled, summary.samples, summary.failed, summary.uncalibrated) == (SAMPLES, SAMPLES, None, None)
    assert sum((summary.score_histogram or {}).values()) == SAMPLES
    assert (summary.calibration_items, summary.calibration_answered) == (len(gold), len(gold))
    assert summary.calibration_kappa == 1.0 and summary.calibration_within_one_ratio == 1.0
    assert (summary.judge_model, summary.judge_endpoint_model, summary.judge_response_model,
            summary.judge_fingerprint, summary.judge_template_sha256) == (
        "judge-test", "judge-test", "judge-test", "fp_honest", TEMPLATE_SHA256)
    page, view = page_and_overview(settings)
    assert 'inference_quality_samples{model="qwen3-8b"} 12.0' in page
    assert 'inference_quality_judge_uncalibrated{model="qwen3-8b"} 0.0' in page
    assert 'inference_quality_judge_agreement_kappa{judge="judge-test",model="qwen3-8b"} 1.0' in page
    layers = view["layers"]
    assert isinstance(layers, dict) and layers["quality"]["state"] in ("ok", "firing")


def test_a_random_judge_fails_the_run_and_no_model_figure_is_exported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with judge_server(JudgeScript(default="random")) as url:
        settings = seeded(tmp_path, url)
        assert run_command(settings, DAY, None, False) == 1
    err = capsys.readouterr().err
    assert re.search(r"qwen3-8b: FAILED: judge uncalibrated \(κ -?\d\.\d\d on \d+ known answers\)", err), err
    summary = stored_summary(settings)
    assert summary.uncalibrated and summary.failed == summary.uncalibrated
    assert summary.score_mean is None and summary.refusal_ratio is None and summary.hallucination_ratio is None
    assert summary.samples == 0 and summary.sampled == SAMPLES and summary.calibration_kappa is not None
    page, view = page_and_overview(settings)
    for name in ("score_mean", "refusal_ratio", "hallucination_ratio", "score_baseline_delta"):
        assert f"inference_quality_{name}{{" not in page
    assert 'inference_quality_judge_uncalibrated{model="qwen3-8b"} 1.0' in page
    assert 'inference_quality_judge_agreement_kappa{judge="judge-test",model="qwen3-8b"}' in page
    layers = view["layers"]
    assert isinstance(layers, dict) and layers["quality"]["state"] == "failing"
    assert f"qwen3-8b run {DAY}: judge uncalibrated (κ" in layers["quality"]["detail"]
    assert exit_code(view) == 1  # `infermon status`
    alerts = view["alerts"]
    assert isinstance(alerts, dict)
    firing = {a["name"]: a for a in alerts["active"] if a["state"] == "firing"}
    assert "QualityJudgeUncalibrated" in firing
    assert not {"QualityScoreLow", "QualityScoreBelowBaseline", "QualityHallucinationHigh"} & set(firing)
    assert firing["QualityJudgeUncalibrated"]["probable_cause"].startswith("judge_failing: judge uncalibrated (κ")
    console = Console(width=100, record=True, color_system=None)
    print_overview(console, view, "http://monitor")
    assert "judge uncalibrated (κ" in console.export_text()  # what `infermon status` prints
    with serve_app(Monitor(settings)) as base:
        report = httpx.get(f"{base}/reports/quality/{DAY}", timeout=10, trust_env=False).text
        home = httpx.get(f"{base}/", timeout=10, trust_env=False).text
    assert "FAILED: judge uncalibrated (κ" in report and "withheld: the judge is uncalibrated" in report
    assert "Known answers the judge got wrong" in report
    assert "judge uncalibrated (κ" in home


def test_a_held_out_gold_set_replaces_the_shipped_one(tmp_path: Path) -> None:
    known = held_out_gold(tmp_path / "held_out.jsonl")
    honest = JudgeScript()
    honest.known = known
    with judge_server(honest) as url:
        settings = seeded(tmp_path, url, calibration=str(tmp_path / "held_out.jsonl"))
        assert run_command(settings, DAY, None, False) == 0
    judged = judged_responses(honest)
    assert len(judged) == SAMPLES + len(known) and set(known) <= set(judged)
    assert not {i.response for i in load_gold(SHIPPED_GOLD)} & set(judged)  # replaced, not added to
    summary = stored_summary(settings)
    assert summary.samples == SAMPLES and summary.calibration_items == len(known) and summary.calibration_kappa == 1.0
    noise = JudgeScript(default="random")
    with judge_server(noise) as url:
        settings = seeded(tmp_path, url, calibration=str(tmp_path / "held_out.jsonl"))
        assert run_command(settings, DAY, None, True) == 1  # the same day judged again by a random judge
    assert stored_summary(settings).score_mean is None


def test_reasons_that_are_not_language_are_suspect_and_counted(tmp_path: Path) -> None:
    with judge_server(JudgeScript(default="gibberish")) as url:
        settings = seeded(tmp_path, url, calibration="off")
        assert run_command(settings, DAY, None, False) == 1  # nothing left to score
    summary = stored_summary(settings)
    assert summary.nonlanguage_reasons == SAMPLES and summary.suspect_verdicts == SAMPLES
    assert summary.score_mean is None and summary.calibration_items == 0


def test_an_unpriced_judge_costs_nothing_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with judge_server(JudgeScript()) as url:
        settings = seeded(tmp_path, url, usd_per_million_input_tokens=0.0, usd_per_million_output_tokens=0.0)
        assert run_command(settings, DAY, None, False) == 0
    assert "judge unpriced" in capsys.readouterr().out
    summary = stored_summary(settings)
    assert summary.judge_cost_usd == 0.0 and summary.judge_priced is False


def judged_days(tmp_path: Path, script: JudgeScript, today_words: int = 60) -> Settings:
    """Two baseline days and today, each judged as the script's judge is when its day comes."""
    with judge_server(script) as url:
        settings = quality_settings(tmp_path, url, sample_size=SAMPLES, baseline_days=2,
                                    judge={"base_url": url, "model": "judge-test", "concurrency": 4,
                                           "calibration": None})
        store = Store(settings.storage.url)
        QualityStore(store.engine).add_samples(
            make_samples(SAMPLES, day_start=days_before(2), prefix="d2") + make_samples(
                SAMPLES, day_start=days_before(1), prefix="d1") + make_samples(SAMPLES, words=today_words))
        store.close()
        for n in (2, 1):
            assert run_command(settings, iso(days_before(n))[:10], None, False) == 0
        script.script.extend(script.next_day)
        run_command(settings, DAY, None, False)
    return settings


def firing(view: dict[str, object]) -> dict[str, dict[str, object]]:
    alerts = view["alerts"]
    assert isinstance(alerts, dict)
    return {a["name"]: a for a in alerts["active"] if a["state"] == "firing"}


def test_a_harsher_judge_is_the_judges_change_not_the_models(tmp_path: Path) -> None:
    script = JudgeScript()
    script.next_day = ["harsh"] * (SAMPLES + len(load_gold(SHIPPED_GOLD)))  # today's judge: one point harsher
    settings = judged_days(tmp_path, script)
    summary = stored_summary(settings)
    changed = summary.judge_changed or ""
    assert "scores known answers" in changed and "lower" in changed
    assert summary.uncalibrated is None and summary.score_baseline_delta is None and summary.score_mean is not None
    page, view = page_and_overview(settings)
    assert 'inference_quality_judge_changed{model="qwen3-8b"} 1.0' in page
    alerts = firing(view)
    assert "QualityJudgeChanged" in alerts
    assert not {"QualityScoreLow", "QualityScoreBelowBaseline", "QualityJudgeUncalibrated"} & set(alerts)
    assert str(alerts["QualityJudgeChanged"]["probable_cause"]).startswith("judge_changed: judge changed: ")


def test_an_honest_judge_and_a_degrading_model_is_the_models_alert(tmp_path: Path) -> None:
    script = JudgeScript()
    script.next_day = []
    settings = judged_days(tmp_path, script, today_words=3)  # today's answers: a few words each
    summary = stored_summary(settings)
    assert summary.judge_changed is None and summary.uncalibrated is None
    assert summary.score_baseline_delta is not None and summary.score_baseline_delta <= -0.5
    _, view = page_and_overview(settings)
    alerts = firing(view)
    assert {"QualityScoreLow", "QualityScoreBelowBaseline"} <= set(alerts)
    assert "QualityJudgeChanged" not in alerts
    assert not str(alerts["QualityScoreBelowBaseline"]["probable_cause"]).startswith(("judge_changed", "judge_failing"))


def test_the_refused_list_is_the_answers_the_refusal_ratio_counts() -> None:
    """A failed run counts keyword refusals only: its report lists those, not the judge's flags."""
    rows = [QualityJudgment(id=i, run_id=1, sample_key=f"s{i}", ts=0.0, prompt="q", response=text,
                            length_tokens=5, length_estimated=True, refusal_keyword=keyword, judged_at=1.0,
                            score=None if i < 3 else 1, refusal=flag, hallucination=False,
                            error="HTTP 500: upstream died" if i < 3 else None, reason="Refuses.", attempts=1,
                            input_tokens=0, judge_output_tokens=0, cost_usd=0.0)
            for i, (text, keyword, flag) in enumerate([("x", False, None), ("y", False, None), ("z", False, None),
                                                       ("I'm sorry, but I can't help.", True, True),
                                                       ("Here is a poem about GPUs.", False, True)])]
    judged = [Judged.of(r) for r in rows]
    summary = summarise(judged, [], {}, 5, 5)
    assert summary.failed and summary.refusals == 1 and summary.refusal_ratio == 0.2
    run = QualityRun(id=1, date=DAY, model="m", status="done", started=0.0, finished=1.0, available=5)
    html = render_report(DAY, [ModelReport(run, summary, rows, [])], thresholds=())
    refused = html.split("<h3>Refused</h3>", 1)[1].split("<h3>", 1)[0]
    assert "I&#x27;m sorry, but I can&#x27;t help." in refused and "a poem about GPUs" not in refused


def test_rejudging_the_baseline_days_with_todays_judge_compares_like_for_like(tmp_path: Path) -> None:
    script = JudgeScript()
    with judge_server(script) as url:
        settings = quality_settings(tmp_path, url, sample_size=SAMPLES, baseline_days=2,
                                    judge={"base_url": url, "model": "judge-test", "concurrency": 4,
                                           "calibration": None})
        store = Store(settings.storage.url)
        QualityStore(store.engine).add_samples(
            make_samples(SAMPLES, day_start=days_before(2), prefix="d2") + make_samples(
                SAMPLES, day_start=days_before(1), prefix="d1") + make_samples(SAMPLES))
        store.close()
        days = [iso(days_before(n))[:10] for n in (2, 1)]
        for day in days:
            assert run_command(settings, day, None, False) == 0
        script.default = "harsh"  # a new judge from today on
        assert run_command(settings, DAY, None, False) == 0
        assert stored_summary(settings).judge_changed is not None
        calls = script.calls
        for day in days:  # the stored samples of the baseline days, judged by today's judge
            assert run_command(settings, day, None, False, rejudge=True) == 0
        assert script.calls - calls == 2 * (SAMPLES + len(load_gold(SHIPPED_GOLD)))
        assert run_command(settings, DAY, None, True) == 0
    summary = stored_summary(settings)
    assert summary.judge_changed is None and summary.score_baseline_delta is not None
    assert summary.baseline == "ready" and summary.samples == SAMPLES


def test_each_floor_makes_a_judge_uncalibrated_and_says_which() -> None:
    judge = JudgeSettings()
    good = Agreement(40, 40, 0.8, 0.95, 0.9, 1.0, 0.95, 0.0)
    assert uncalibrated(good, judge) is None
    assert uncalibrated(Agreement(0, 0, None, None, None, None, None, None), judge) is None  # calibration off
    cases = {
        "judge uncalibrated (κ 0.08 on 40 known answers): below the floor κ 0.6": replace(good, kappa=0.08),
        "judge uncalibrated (κ 0.90 on 40 known answers): within 1 point on 70 %, below the floor 80 %":
            replace(good, within_one_ratio=0.7),
        "judge uncalibrated (κ 0.90 on 40 known answers): the hallucination flag agrees on 50 %, below the floor 80 %":
            replace(good, hallucination_agreement=0.5),
        "judge uncalibrated (verdicts on only 30 of 40 known answers)": replace(good, answered=30),
        "judge uncalibrated (κ undefined on 40 known answers): below the floor κ 0.6": replace(good, kappa=None),
    }
    for text, found in cases.items():
        assert uncalibrated(found, judge) == text


def test_what_counts_as_a_changed_judge() -> None:
    base = QualitySummary(calibration_items=42, calibration_kappa=0.95, calibration_bias=-0.05, judge_model="j",
                          judge_endpoint_model="j", judge_response_model="j-2026", judge_fingerprint="fp_a",
                          judge_template_sha256="abc", judge_rubric_version="1")
    assert judge_changed(replace(base, calibration_bias=0.1, judge_fingerprint="fp_b"), [base, base]) is None
    assert judge_changed(replace(base, judge_response_model="j-2027"), [base]) == \
        "judge changed: answering model j-2026 → j-2027"
    harsher = judge_changed(replace(base, calibration_bias=-0.8, judge_fingerprint="fp_b"), [base])
    assert harsher == ("judge changed: it scores known answers 0.75 lower than on the baseline days (mean difference "
                       "-0.05 → -0.80); system_fingerprint fp_a → fp_b")
    kappa = judge_changed(replace(base, calibration_kappa=0.7), [base])
    assert kappa == "judge changed: κ on known answers 0.95 → 0.70"
    assert judge_changed(replace(base, judge_template_sha256="def"), [QualitySummary()]) is None  # old runs: unknown
