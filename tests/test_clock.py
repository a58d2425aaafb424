"""The monitor's clock does not step with the system clock (monitor/clock.py)."""

from __future__ import annotations

import logging
import time

import pytest

from monitor import clock as clock_module
from monitor.clock import SteadyClock


def test_a_step_of_the_system_clock_moves_neither_the_clock_nor_its_rates_and_is_said(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    steady = SteadyClock()
    assert steady() == pytest.approx(time.time(), abs=0.05)
    assert steady.status() == {"source": "steady", "system_clock_stepped_seconds": pytest.approx(0.0, abs=0.05)}
    system = time.time
    monkeypatch.setattr(clock_module.time, "time", lambda: system() + 3600.0)  # an operator's `date -s`
    assert steady() == pytest.approx(system(), abs=0.05)  # not an hour ahead
    with caplog.at_level(logging.WARNING, logger="monitor.clock"):
        assert steady.status()["system_clock_stepped_seconds"] == pytest.approx(3600.0, abs=0.05)
        steady.note_step()
        steady.note_step()  # the same step: said once
        monkeypatch.setattr(clock_module.time, "time", lambda: system() - 5.0)
        assert steady.stepped() == pytest.approx(-5.0, abs=0.05)
        steady.note_step()
    assert [r.getMessage()[:46] for r in caplog.records] == ["the system clock was stepped by +3600.0 s sinc",
                                                             "the system clock was stepped by -5.0 s since st"[:46]]
