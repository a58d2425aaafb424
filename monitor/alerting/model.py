"""An alert as Alertmanager sees it: the one shape shared by the evaluator, the receiver and delivery.

The embedded evaluator produces these on every transition (firing, resolved); the Alertmanager
receiver (`POST /api/v1/alertmanager`) parses them from Alertmanager's payload. Delivery (the
outbox and the receivers) takes them from either through `AlertSink.enqueue`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

Status = Literal["firing", "resolved"]

# prometheus/common model: FNV-1a 64 over sorted label names and values, each followed by 0xff.
_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_SEPARATOR = 0xFF


def fingerprint(labels: Mapping[str, str]) -> str:
    """Alertmanager's fingerprint of a label set (`LabelSet.Fingerprint()`), as 16 hex digits."""
    return _fingerprint(tuple(sorted(labels.items())))


@functools.lru_cache(maxsize=1 << 16)  # an alert's labels repeat every evaluation; FNV byte by byte is slow
def _fingerprint(pairs: tuple[tuple[str, str], ...]) -> str:
    digest = _FNV_OFFSET
    for pair in pairs:
        for part in pair:
            for byte in part.encode():
                digest = ((digest ^ byte) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
            digest = ((digest ^ _SEPARATOR) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{digest:016x}"


@dataclass(frozen=True)
class Alert:
    """One alert at one transition. `ends_at` is set once it resolved (UTC datetimes)."""

    labels: Mapping[str, str]  # alertname, severity, layer, and the series' own labels
    annotations: Mapping[str, str]  # summary, description, runbook, (later) context, probable_cause
    starts_at: datetime
    ends_at: datetime | None = None
    generator_url: str = ""
    fingerprint: str = field(default="")

    def __post_init__(self) -> None:
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", fingerprint(self.labels))

    @property
    def status(self) -> Status:
        return "resolved" if self.ends_at is not None else "firing"

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")


class AlertSink(Protocol):
    """Where transitions go: delivery persists them (outbox) before anything is sent."""

    def enqueue(self, alerts: Sequence[Alert], source: str) -> None:
        """`source` is "embedded" (our evaluator) or "alertmanager" (the receiver endpoint)."""
        ...
