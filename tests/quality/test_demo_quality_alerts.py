"""The demo's quality alerts end with the run that raised them: a bad day's QualityScoreLow and
QualityHallucinationHigh resolve at the first evaluation whose /metrics page holds a later, healthy
run's numbers - in the monitor (the page read back by the embedded evaluator) and in Prometheus
(promtool on the demo's rule file), as they do on the shipped alerts/quality.yml.

The demo once added its 5-minute hysteresis (`keep_firing_for`) to these rules too: both
evaluators then held the bad day's alerts 5 minutes past the healthy run (Prometheus' semantics,
the second case below), although a number that changes once a run cannot flap."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from monitor.config import load_settings
from monitor.runtime import Monitor
from monitor.sim.demo_cycle import KEEP_FIRING, demo_rules
from tests.alerting.promtool_replay import Replay
from tests.alerting.test_evaluator import RecordingSink
from tests.conftest import FIXTURES, require_binary

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BAD, HEALTHY = {"score_mean": 3.4, "hallucination_ratio": 0.067}, {"score_mean": 3.95, "hallucination_ratio": 0.0}
ALERTS = {"QualityScoreLow": "score_mean", "QualityHallucinationHigh": "hallucination_ratio"}
GAUGE = {"score_mean": "inference_quality_score_mean", "hallucination_ratio": "inference_quality_hallucination_ratio"}
BAD_MINUTES = 10  # the bad run's numbers at 0..9 m, the healthy run's from 10 m on


def _quality_rules(path: Path) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]}


def _firing(rules: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The bad run's two alerts as promtool lists them: labels, and the annotations rendered."""
    out = {}
    for name, field in ALERTS.items():
        rule = rules[name]
        value = f"{BAD[field]:g}"  # Go's %v of these floats: 3.4, 0.067
        annotations = {key: str(text).replace("{{ $value }}", value).replace("{{ $labels.model }}", MODEL)
                       for key, text in rule["annotations"].items()}
        out[name] = [{"exp_labels": {"model": MODEL, **rule["labels"]}, "exp_annotations": annotations}]
    return out


def _unit_test(rules_file: Path, held_minutes: int) -> Path:
    """A promtool unit test of the two alerts: firing on the bad run, still firing `held_minutes`
    into the healthy run's numbers (its hold), and not at the evaluation after."""
    rules = _quality_rules(rules_file)
    firing = _firing(rules)
    series = [{"series": f'{GAUGE[field]}{{model="{MODEL}"}}',
               "values": f"{BAD[field]}x{BAD_MINUTES - 1} {HEALTHY[field]}x10"} for field in ALERTS.values()]
    cases = []
    for name in ALERTS:
        cases.append({"eval_time": f"{BAD_MINUTES - 1}m", "alertname": name, "exp_alerts": firing[name]})
        for minute in range(BAD_MINUTES, BAD_MINUTES + held_minutes):
            cases.append({"eval_time": f"{minute}m", "alertname": name, "exp_alerts": firing[name]})
        cases.append({"eval_time": f"{BAD_MINUTES + held_minutes}m", "alertname": name, "exp_alerts": []})
    document = {"rule_files": [rules_file.name], "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases}]}
    path = rules_file.parent / "demo_quality_test.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return path


def _with_hold(path: Path, hold: str) -> None:
    """The demo's quality rules as they were: its hysteresis on every rule."""
    data = yaml.safe_load(path.read_text())
    for group in data["groups"]:
        for rule in group["rules"]:
            rule["keep_firing_for"] = hold
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


@pytest.mark.prometheus
@pytest.mark.parametrize("hold", [None, KEEP_FIRING], ids=["demo", "demo-with-5m-hold"])
def test_prometheus_and_the_embedded_evaluator_resolve_them_alike(tmp_path: Path, hold: str | None) -> None:
    """The demo's file: resolved at the first evaluation on the healthy numbers, by both. With the
    5-minute hold the demo once added, both hold them exactly 5 minutes: Prometheus' semantics, so
    the fix is in the demo's rules, not in the evaluator."""
    [quality] = [p for p in demo_rules(tmp_path) if p.stem == "quality"]
    if hold is not None:
        _with_hold(quality, hold)
    unit = _unit_test(quality, held_minutes=5 if hold is not None else 0)
    result = subprocess.run([require_binary("promtool"), "test", "rules", unit.name], cwd=tmp_path,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert Replay(unit).run() == []
    if hold is None:  # the shipped file's: no `for`, no hold (each number holds until the next run)
        assert all("for" not in rule and "keep_firing_for" not in rule for rule in _quality_rules(quality).values())


class _Engine:
    page = (FIXTURES / "sample_vllm_v1.prom").read_text()

    def handler(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=self.page)


def _monitor(rules: list[Path], clock: list[float], sink: RecordingSink) -> Monitor:
    settings = load_settings(None, {
        "infra": {"nvml": {"enabled": "false"}},
        "service": {"targets": [{"name": "vllm-a", "url": "http://a/metrics"}]},
        "alerting": {"evaluation_interval": "15s", "rules_files": [str(p) for p in rules]},
    })
    client = httpx.AsyncClient(transport=httpx.MockTransport(_Engine().handler))
    return Monitor(settings, client=client, wall=lambda: clock[0], sink=sink)  # type: ignore[arg-type]


def test_the_monitor_resolves_a_bad_days_alerts_with_todays_healthy_run(tmp_path: Path) -> None:
    """As `infermon demo` runs: the history's last day judged bad, then today's run healthy. Each
    step as a publish tick does it: the view refreshed from the store, /metrics rendered, the page
    read back by the embedded evaluator."""
    clock, sink = [1_767_300_000.0], RecordingSink()

    async def run() -> None:
        monitor = _monitor(demo_rules(tmp_path / "rules"), clock, sink)
        store = monitor.quality.store
        await monitor.run_once()  # every layer collected once: no rule held back

        async def judged(day: str, summary: dict[str, float]) -> str:
            run_id = store.create_run(day, MODEL, clock[0], 30, [])
            store.finish_run(run_id, {**summary, "samples": 30}, clock[0])
            await monitor.quality.refresh()
            clock[0] += 15.0
            monitor.publish()
            await monitor.evaluate_alerts()
            return monitor.metrics_text().decode()

        page = await judged("2026-12-05", BAD)
        assert f'inference_quality_score_mean{{model="{MODEL}"}} 3.4' in page
        assert {(a.name, a.status) for a in sink.sent} == {(name, "firing") for name in ALERTS}
        page = await judged("2026-12-06", HEALTHY)
        assert f'inference_quality_score_mean{{model="{MODEL}"}} 3.95' in page
        resolved = [a for a in sink.sent if a.status == "resolved"]
        assert {a.name for a in resolved} == set(ALERTS), [(a.name, a.status) for a in sink.sent]
        assert all(a.ends_at is not None and a.ends_at.timestamp() == clock[0] for a in resolved)
        assert monitor.alerting is not None and monitor.alerting.active() == []
        await monitor.aclose()

    asyncio.run(run())
