"""bench.fleet_view and bench.alert_eval at a toy size: they run, and what they assert holds (the
page kept per target equals the whole render; every target's alerts are active)."""

from __future__ import annotations

import re
import sys

import pytest

from bench import alert_eval, fleet_view


def test_fleet_view_runs_and_its_kept_page_equals_the_whole(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["fleet_view", "--targets", "12", "--models", "2", "--repeats", "4"])
    fleet_view.main()  # asserts each tick's kept page equals the whole render
    out = capsys.readouterr().out
    assert "12 targets x 2 models" in out and re.search(r"kept per target \d+ ms", out)


def test_alert_eval_runs_with_two_alerts_a_target(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["alert_eval", "--targets", "10", "--repeats", "2"])
    alert_eval.main()
    out = capsys.readouterr().out
    assert "10 targets, 20 alerts active" in out and "every TTFT moved" in out, out
