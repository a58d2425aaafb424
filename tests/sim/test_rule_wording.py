"""What a rule's words say about time matches what the rule does: "over the last 5 minutes" is its
window, "for 10 minutes" its `for` -- in the shipped files and in the demo's, which shortens both
(the demo said "over the last 5 minutes" on window=1m). And no description claims a duration has
passed: it is shown while the alert is pending too ("has been above 95 % for 10 minutes" as
GPUUtilizationSaturated went pending)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from monitor.config import load_settings
from monitor.rulefiles.rules import AlertRule, load_rules
from monitor.sim.demo_cycle import CYCLE_ALERTS, demo_rules

UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
FOR_SAID = re.compile(r"\bfor (\d+) (second|minute|hour|day)s?\b")
WINDOW_SAID = re.compile(r"\bthe last (?:(\d+) )?(second|minute|hour|day)s?\b")
WINDOW = re.compile(r'window="(\d+)([smhd])"')
CLAIMED = re.compile(r"\bhas (?:been|had|failed|drawn|not)\b[^.;:]*\bfor \d+ (?:second|minute|hour)")


def said(pattern: re.Pattern[str], text: str) -> set[float]:
    return {float(n or 1) * UNITS[unit] for n, unit in pattern.findall(text)}


def words(rule: AlertRule) -> str:
    return " ".join(t.text for t in rule.annotations.values())


def mismatches(rules: list[AlertRule]) -> list[str]:
    found = []
    for rule in rules:
        text = words(rule)
        for seconds in said(FOR_SAID, text):
            if seconds != rule.for_seconds:
                found.append(f"{rule.name}: says for {seconds:g} s, `for` is {rule.for_seconds:g} s")
        windows = {float(n) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[u] for n, u in WINDOW.findall(rule.expr_text)}
        if rule.trend or len(windows) != 1:
            continue  # a trend rule's "last 6 hours" is its history range, not the service window
        for seconds in said(WINDOW_SAID, text) - windows:
            found.append(f"{rule.name}: says the last {seconds:g} s, its window is {windows}")
    return found


def test_the_shipped_rules_say_their_own_window_and_for() -> None:
    rules = list(load_rules(load_settings(None).alerting.rules_files).rules)
    assert mismatches(rules) == []
    ttft = next(r for r in rules if r.name == "TTFTP99High")
    assert "over the last 5 minutes" in words(ttft)  # the check above reads real phrases


@pytest.mark.parametrize("variant", ["demo", "scorecard"])
def test_the_demos_rules_say_the_shortened_window_and_for(tmp_path: Path, variant: str) -> None:
    extra = {"cycle_keep_firing": "1m", "cycle_for": {"ThroughputDrop": "2m"},
             "shipped_window": frozenset({"ErrorRateHigh"})} if variant == "scorecard" else {}
    rules = list(load_rules(demo_rules(tmp_path, **extra), shipped=True).rules)  # type: ignore[arg-type]
    assert mismatches(rules) == []
    by_name = {r.name: r for r in rules}
    assert "over the last minute" in words(by_name["TTFTP99High"])
    assert "for 30 seconds" in words(by_name["TargetDown"]) and by_name["TargetDown"].name in CYCLE_ALERTS
    if variant == "scorecard":
        assert "over the last 5 minutes" in words(by_name["ErrorRateHigh"])  # kept its shipped window


def test_no_description_claims_time_has_passed() -> None:
    rules = load_rules(load_settings(None).alerting.rules_files).rules
    claims = [f"{r.name}: {m.group(0)}" for r in rules for m in CLAIMED.finditer(words(r))]
    assert claims == []
    saturated = next(r for r in rules if r.name == "GPUUtilizationSaturated")
    assert "for 10 minutes" in words(saturated)  # the `for` is still said, as what makes it fire
