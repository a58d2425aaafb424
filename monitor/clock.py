"""The monitor's clock: the wall time at start, carried on by the monotonic clock.

Samples are stamped with it, and every rate, window and baseline is computed over those stamps.
A step of the system clock (a fresh machine syncing its time, an operator's `date -s`) moved
`time.time()` and so every later stamp: a forward step of 6.4 s made a baseline of 8 s look
covered at once and its throughput ratio read 3.8-7.4x at constant load (CI saw 4.97x). This
clock does not step; NTP's slewing still reaches it (Linux slews CLOCK_MONOTONIC as it slews the
wall clock). What the system clock was stepped by since start shows in `/api/v1/status` under
`clock`, and a step of a second or more is logged once (`note_step`); a restart takes the
system's time again.
"""

from __future__ import annotations

import logging
import time
from typing import TypedDict

log = logging.getLogger("monitor.clock")
NOTED_STEP_S = 1.0


class ClockStatus(TypedDict):
    source: str  # steady | set (a test's clock)
    system_clock_stepped_seconds: float


class SteadyClock:
    def __init__(self) -> None:
        self.offset = time.time() - time.monotonic()
        self._noted = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def stepped(self) -> float:
        """How far the system clock was stepped since start (seconds; positive: forward)."""
        return time.time() - self()

    def note_step(self) -> None:
        """Log a step of the system clock of NOTED_STEP_S or more, once (the monitor calls this
        after each cost run, whether or not anyone reads its status)."""
        stepped = self.stepped()
        if abs(stepped) >= NOTED_STEP_S and abs(stepped - self._noted) >= NOTED_STEP_S:
            self._noted = stepped
            log.warning("the system clock was stepped by %+.1f s since start; the monitor's clock was not "
                        "(its timestamps are that far from the system's until a restart)", stepped)

    def status(self) -> ClockStatus:
        return {"source": "steady", "system_clock_stepped_seconds": round(self.stepped(), 3)}
