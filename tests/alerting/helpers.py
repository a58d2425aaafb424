"""Shared test pieces: receiver settings pointing at the stand-ins, alerts, an injected clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from monitor.alerting.model import Alert
from monitor.config import ReceiverSettings
from tests.alerting.imserver import BEARER, KINDS, SECRETS, ImServer

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

# Run as `python -c HOLD_LOCK path.db`: holds an exclusive SQLite lock from "locked" on its stdout
# until its stdin is closed (another process that keeps the monitor's database locked).
HOLD_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()  # until the test closes our stdin
db.execute("COMMIT")
"""


def wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    """Until `condition()` holds, polled every 50 ms; fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@dataclass
class Clock:
    now: float = T0.timestamp()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def receiver_data(im: ImServer, kind: str, **overrides: Any) -> dict[str, Any]:
    """A receiver's configuration, as it would be written in the YAML file."""
    data: dict[str, Any] = {"name": f"{kind}-rx", "type": kind, "url": im.url(kind)}
    if kind in SECRETS:
        data["secret"] = SECRETS[kind]
    if kind == "webhook":
        data["token"] = BEARER
    return {**data, **overrides}


def receiver(im: ImServer, kind: str, **overrides: Any) -> ReceiverSettings:
    return ReceiverSettings(**receiver_data(im, kind, **overrides))


def all_receivers(im: ImServer, **overrides: Any) -> list[ReceiverSettings]:
    return [receiver(im, kind, **overrides) for kind in KINDS]


def alert(name: str = "GPUHot", resolved_after: float | None = None, start: datetime = T0, **labels: str) -> Alert:
    ends = None
    if resolved_after is not None:
        ends = datetime.fromtimestamp(start.timestamp() + resolved_after, UTC)
    return Alert(
        labels={"alertname": name, "severity": "warning", **labels},
        annotations={"summary": f"{name} on {labels or 'all'}", "description": "value is 87"},
        starts_at=start,
        ends_at=ends,
        generator_url="http://monitor:9480/alerts",
    )
